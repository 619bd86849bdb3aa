// A content-addressed store of state blocks on disk (the SSD tier). Each block is one file named
// by its key, with a header (magic, version, kind, key, model fingerprint, payload size and xxh3
// checksum). Writes go to a temporary file, are synced, then renamed into place, so a crash
// leaves the old block or none, never a torn one. Reads check everything; a block that fails a
// check is deleted and reported as a miss. The index is rebuilt from the directory at start-up,
// so the cache survives restarts. Disk full or I/O errors degrade to misses and a log line.
// A write's data and fdatasync happen outside the index lock (one write at a time), so
// lookups, reads and stats() do not wait for them; the rename into place takes the lock.
// I/O uses io_uring with O_DIRECT where the kernel and filesystem allow, plain I/O otherwise.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "state/block_key.h"
#include "state/block_store.h"

namespace hibana {

struct SsdStoreOptions {
  std::string dir;
  uint64_t capacity_bytes = uint64_t(8) << 30;
  uint64_t model_fingerprint = 0;  // blocks of another model are never used
  bool direct_io = true;           // try O_DIRECT + io_uring
  // Tests only: called by put() while its temporary file is open, before the data is written
  // (the index lock is not held then), so a test can act while a write is in progress.
  std::function<void()> on_write;
};

struct SsdStoreStats {
  uint64_t blocks = 0, bytes = 0;
  uint64_t hits = 0, misses = 0, writes = 0, write_failures = 0;
  uint64_t corrupt = 0, foreign = 0, evictions = 0;
  bool direct_io = false, io_uring = false;
};

class SsdStore final : public BlockStore {
 public:
  explicit SsdStore(const SsdStoreOptions& options);
  ~SsdStore() override;
  SsdStore(const SsdStore&) = delete;
  SsdStore& operator=(const SsdStore&) = delete;

  // Stores a block (replacing one with the same key); false when it could not be written.
  bool put(const BlockKey& key, uint32_t kind, std::span<const uint8_t> payload) override;
  // The payload of a block of this kind, or nullopt (absent, corrupt, another model's).
  std::optional<std::vector<uint8_t>> get(const BlockKey& key, uint32_t kind) override;
  bool contains(const BlockKey& key) const override;
  void clear_block(const BlockKey& key) override;
  void clear();
  SsdStoreStats stats() const;

  // Reads a cache directory's blocks without opening it for writing (`hibana cache stats`):
  // per model fingerprint, block count and bytes; those of tensor-parallel ranks (under
  // dir/rank-R-of-N) too, with `part` naming that subdirectory.
  struct DirSummary {
    uint64_t fingerprint, blocks, bytes;
    std::string part;  // empty: dir itself
  };
  static std::vector<DirSummary> summarize(const std::string& dir);
  // Deletes every block file under dir (`hibana cache clear`); returns how many.
  static uint64_t clear_dir(const std::string& dir);

 private:
  struct Entry {
    uint64_t bytes;
    uint64_t last_use;
  };
  struct Io;
  std::string path_of(const BlockKey& key) const;
  void load_index();
  void evict_to(uint64_t limit);
  void forget(const BlockKey& key);

  SsdStoreOptions options_;
  std::string root_;              // dir/<fingerprint>
  std::unique_ptr<Io> io_;        // reads (mutex_ held)
  std::unique_ptr<Io> write_io_;  // writes (write_mutex_ held, not mutex_)
  std::mutex write_mutex_;
  mutable std::mutex mutex_;
  std::unordered_map<BlockKey, Entry, BlockKeyHash> index_;
  uint64_t clock_ = 0;
  SsdStoreStats stats_;
};

}  // namespace hibana
