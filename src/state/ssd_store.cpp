#include "state/ssd_store.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"

namespace hibana {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'H', 'I', 'B', 'S', 'T', 'A', 'T', '1'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeader = 64;
constexpr size_t kAlign = 4096;

struct Header {
  uint32_t version, kind;
  uint64_t key_hi, key_lo, fingerprint, payload_bytes, payload_hash;
};

void put_u32(uint8_t* p, uint32_t v) {
  std::memcpy(p, &v, 4);
}
void put_u64(uint8_t* p, uint64_t v) {
  std::memcpy(p, &v, 8);
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

void encode_header(const Header& h, uint8_t* p) {
  std::memset(p, 0, kHeader);
  std::memcpy(p, kMagic, 8);
  put_u32(p + 8, h.version);
  put_u32(p + 12, h.kind);
  put_u64(p + 16, h.key_hi);
  put_u64(p + 24, h.key_lo);
  put_u64(p + 32, h.fingerprint);
  put_u64(p + 40, h.payload_bytes);
  put_u64(p + 48, h.payload_hash);
  put_u64(p + 56, XXH3_64bits(p, 56));
}

// False when the bytes are not a header of this format (or it was damaged).
bool decode_header(const uint8_t* p, Header& h) {
  if (std::memcmp(p, kMagic, 8) != 0) return false;
  if (get_u64(p + 56) != XXH3_64bits(p, 56)) return false;
  h.version = get_u32(p + 8);
  h.kind = get_u32(p + 12);
  h.key_hi = get_u64(p + 16);
  h.key_lo = get_u64(p + 24);
  h.fingerprint = get_u64(p + 32);
  h.payload_bytes = get_u64(p + 40);
  h.payload_hash = get_u64(p + 48);
  return h.version == kVersion;
}

struct AlignedBuffer {
  uint8_t* data = nullptr;
  size_t size = 0;
  explicit AlignedBuffer(size_t n) : size(n) {
    data = static_cast<uint8_t*>(std::aligned_alloc(kAlign, std::max(kAlign, n)));
    if (!data) throw Error(ErrorKind::out_of_memory, "SSD cache: no memory for an I/O buffer");
  }
  ~AlignedBuffer() { std::free(data); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
};

std::string fingerprint_dir(uint64_t fp) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fp));
  return buf;
}

}  // namespace

// Whole-file reads and writes: io_uring when it can be set up, pread/pwrite otherwise.
struct SsdStore::Io {
  bool uring = false;
  io_uring ring{};
  explicit Io(bool want) {
    if (want) uring = io_uring_queue_init(8, &ring, 0) == 0;
  }
  ~Io() {
    if (uring) io_uring_queue_exit(&ring);
  }
  // Returns 0 or -errno.
  int transfer(bool write, int fd, uint8_t* buf, size_t n) {
    size_t done = 0;
    while (done < n) {
      ssize_t r;
      if (uring) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring);
        if (!sqe) return -EAGAIN;
        if (write) {
          io_uring_prep_write(sqe, fd, buf + done, static_cast<unsigned>(n - done), done);
        } else {
          io_uring_prep_read(sqe, fd, buf + done, static_cast<unsigned>(n - done), done);
        }
        io_uring_submit(&ring);
        io_uring_cqe* cqe = nullptr;
        int w = io_uring_wait_cqe(&ring, &cqe);
        if (w < 0) return w;
        r = cqe->res;
        io_uring_cqe_seen(&ring, cqe);
      } else {
        r = write ? ::pwrite(fd, buf + done, n - done, static_cast<off_t>(done))
                  : ::pread(fd, buf + done, n - done, static_cast<off_t>(done));
        if (r < 0) r = -errno;
      }
      if (r == -EINTR) continue;
      if (r < 0) return static_cast<int>(r);
      if (r == 0) return write ? -EIO : -ENODATA;  // short file
      done += static_cast<size_t>(r);
    }
    return 0;
  }
};

SsdStore::SsdStore(const SsdStoreOptions& options) : options_(options) {
  check(!options.dir.empty(), ErrorKind::invalid_argument, "the cache directory is empty");
  root_ = (fs::path(options.dir) / fingerprint_dir(options.model_fingerprint)).string();
  std::error_code ec;
  fs::create_directories(fs::path(root_) / "tmp", ec);
  if (ec) {
    throw Error(ErrorKind::io,
                options.dir + ": cannot create the cache directory: " + ec.message());
  }
  io_ = std::make_unique<Io>(options.direct_io);
  write_io_ = std::make_unique<Io>(options.direct_io);
  stats_.io_uring = io_->uring && write_io_->uring;
  stats_.direct_io = options.direct_io;
  load_index();
}

SsdStore::~SsdStore() = default;

std::string SsdStore::path_of(const BlockKey& key) const {
  const std::string h = key.hex();
  return root_ + "/" + h.substr(0, 2) + "/" + h + ".blk";
}

void SsdStore::load_index() {
  std::error_code ec;
  for (auto& e : fs::directory_iterator(fs::path(root_) / "tmp", ec)) fs::remove(e.path(), ec);
  std::vector<std::pair<fs::file_time_type, BlockKey>> found;
  for (auto it = fs::recursive_directory_iterator(root_, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file() || it->path().extension() != ".blk") continue;
    const std::string path = it->path().string();
    uint8_t head[kHeader];
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    bool ok = fd >= 0 && ::pread(fd, head, kHeader, 0) == static_cast<ssize_t>(kHeader);
    if (fd >= 0) ::close(fd);
    Header h{};
    ok = ok && decode_header(head, h);
    const uint64_t size = it->file_size(ec);
    if (!ok || h.fingerprint != options_.model_fingerprint || h.payload_bytes + kHeader > size ||
        BlockKey{h.key_hi, h.key_lo}.hex() + ".blk" != it->path().filename().string()) {
      ++stats_.corrupt;
      fs::remove(it->path(), ec);
      continue;
    }
    BlockKey key{h.key_hi, h.key_lo};
    index_[key] = {size, 0};
    stats_.bytes += size;
    found.emplace_back(it->last_write_time(ec), key);
  }
  // Least recently written first, so eviction order survives a restart.
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [t, key] : found) index_[key].last_use = ++clock_;
  stats_.blocks = index_.size();
  if (!index_.empty()) {
    log_info("SSD cache ", root_, ": ", index_.size(), " blocks, ", stats_.bytes >> 20, " MiB");
  }
  evict_to(options_.capacity_bytes);
}

bool SsdStore::put(const BlockKey& key, uint32_t kind, std::span<const uint8_t> payload) {
  const size_t padded = (kHeader + payload.size() + kAlign - 1) / kAlign * kAlign;
  if (padded > options_.capacity_bytes) return false;
  AlignedBuffer buf(padded);
  Header h{kVersion,
           kind,
           key.hi,
           key.lo,
           options_.model_fingerprint,
           payload.size(),
           XXH3_64bits(payload.data(), payload.size())};
  encode_header(h, buf.data);
  std::memcpy(buf.data + kHeader, payload.data(), payload.size());
  std::memset(buf.data + kHeader + payload.size(), 0, padded - kHeader - payload.size());

  static std::atomic<uint64_t> counter{0};
  const std::string tmp = root_ + "/tmp/" + key.hex() + "." + std::to_string(::getpid()) + "." +
                          std::to_string(counter++);
  const std::string final_path = path_of(key);
  auto fail = [&](const std::string& what, int err) {
    ::unlink(tmp.c_str());
    std::lock_guard<std::mutex> lock(mutex_);
    // A full disk fails every write: say so at the 1st, 2nd, 4th, 8th... failure, not each.
    const uint64_t n = ++stats_.write_failures;
    if ((n & (n - 1)) == 0) {
      log_warn("SSD cache: cannot ", what, " ", tmp, ": ", std::strerror(err),
               " (the block stays uncached; ", n, n == 1 ? " write failure" : " write failures",
               " so far)");
    }
    return false;
  };
  int rc = 0;
  {
    // The data and its sync, the slow part, outside the index lock.
    std::lock_guard<std::mutex> write_lock(write_mutex_);
    int flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
    int fd = options_.direct_io ? ::open(tmp.c_str(), flags | O_DIRECT, 0644) : -1;
    if (fd < 0) fd = ::open(tmp.c_str(), flags, 0644);  // filesystems without O_DIRECT (tmpfs)
    if (fd < 0) return fail("create", errno);
    if (options_.on_write) options_.on_write();
    rc = write_io_->transfer(true, fd, buf.data, padded);
    if (rc == 0 && ::fdatasync(fd) != 0) rc = -errno;
    ::close(fd);
  }
  if (rc != 0) return fail("write", -rc);
  std::error_code ec;
  fs::create_directories(fs::path(final_path).parent_path(), ec);
  std::unique_lock<std::mutex> lock(mutex_);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) {
    const int err = errno;
    lock.unlock();
    return fail("rename", err);
  }
  auto it = index_.find(key);
  if (it != index_.end()) stats_.bytes -= it->second.bytes;
  index_[key] = {padded, ++clock_};
  stats_.bytes += padded;
  stats_.blocks = index_.size();
  ++stats_.writes;
  evict_to(options_.capacity_bytes);
  return true;
}

std::optional<std::vector<uint8_t>> SsdStore::get(const BlockKey& key, uint32_t kind) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++stats_.misses;
    return std::nullopt;
  }
  const std::string path = path_of(key);
  auto corrupt = [&](const char* why) -> std::optional<std::vector<uint8_t>> {
    log_warn("SSD cache: block ", key.hex(), " ", why, "; dropped");
    ++stats_.corrupt;
    ++stats_.misses;
    ::unlink(path.c_str());
    forget(key);
    return std::nullopt;
  };
  int fd = options_.direct_io ? ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT) : -1;
  if (fd < 0) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return corrupt("cannot be opened");
  struct stat st {};
  ::fstat(fd, &st);
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < kHeader || size % kAlign != 0) {
    ::close(fd);
    return corrupt("has a bad size");
  }
  AlignedBuffer buf(size);
  int rc = io_->transfer(false, fd, buf.data, size);
  ::close(fd);
  if (rc != 0) return corrupt("cannot be read");
  Header h{};
  if (!decode_header(buf.data, h)) return corrupt("has a damaged header");
  if (h.key_hi != key.hi || h.key_lo != key.lo || h.fingerprint != options_.model_fingerprint) {
    return corrupt("belongs to another key or model");
  }
  if (h.kind != kind) {
    ++stats_.misses;
    return std::nullopt;
  }
  if (h.payload_bytes > size - kHeader) return corrupt("is truncated");
  if (XXH3_64bits(buf.data + kHeader, h.payload_bytes) != h.payload_hash) {
    return corrupt("fails its checksum");
  }
  it->second.last_use = ++clock_;
  ++stats_.hits;
  return std::vector<uint8_t>(buf.data + kHeader, buf.data + kHeader + h.payload_bytes);
}

bool SsdStore::contains(const BlockKey& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return index_.count(key) != 0;
}

void SsdStore::forget(const BlockKey& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return;
  stats_.bytes -= it->second.bytes;
  index_.erase(it);
  stats_.blocks = index_.size();
}

void SsdStore::evict_to(uint64_t limit) {
  while (stats_.bytes > limit && !index_.empty()) {
    auto victim = std::min_element(index_.begin(), index_.end(), [](const auto& a, const auto& b) {
      return a.second.last_use < b.second.last_use;
    });
    const BlockKey key = victim->first;
    ::unlink(path_of(key).c_str());
    forget(key);
    ++stats_.evictions;
  }
}

void SsdStore::clear_block(const BlockKey& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!index_.count(key)) return;
  ::unlink(path_of(key).c_str());
  forget(key);
}

void SsdStore::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [key, e] : index_) ::unlink(path_of(key).c_str());
  index_.clear();
  stats_.bytes = 0;
  stats_.blocks = 0;
}

SsdStoreStats SsdStore::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

std::vector<SsdStore::DirSummary> SsdStore::summarize(const std::string& dir) {
  std::vector<DirSummary> out;
  std::error_code ec;
  for (auto& sub : fs::directory_iterator(dir, ec)) {
    const std::string name = sub.path().filename().string();
    if (sub.is_directory() && name.rfind("rank-", 0) == 0) {  // a tensor-parallel rank's
      for (DirSummary r : summarize(sub.path().string())) {
        r.part = name;
        out.push_back(r);
      }
      continue;
    }
    if (!sub.is_directory() || name.size() != 16) continue;
    DirSummary s{std::strtoull(name.c_str(), nullptr, 16), 0, 0, {}};
    for (auto it = fs::recursive_directory_iterator(sub.path(), ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file() && it->path().extension() == ".blk") {
        ++s.blocks;
        s.bytes += it->file_size(ec);
      }
    }
    out.push_back(s);
  }
  return out;
}

uint64_t SsdStore::clear_dir(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file() && it->path().extension() == ".blk") {
      fs::remove(it->path(), ec);
      ++n;
    }
  }
  return n;
}

}  // namespace hibana
