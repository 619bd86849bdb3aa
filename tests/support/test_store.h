// A BlockStore in memory for tests of the tiers above it: puts can be made to fail (a full
// disk) or to wait until released (a slow disk), so a test can act while a write is in progress.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "state/block_store.h"

namespace hibana::test {

class TestStore final : public BlockStore {
 public:
  // Every later put fails (true) or succeeds again (false).
  void fail_puts(bool fail) {
    std::lock_guard<std::mutex> lock(mutex_);
    fail_ = fail;
  }
  // The next `n` puts wait in put() until release().
  void hold_next(int n) {
    std::lock_guard<std::mutex> lock(mutex_);
    to_hold_ = n;
    released_ = false;
  }
  // Blocks until `n` held puts are waiting.
  void wait_for_held(int n) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return waiting_ >= n; });
  }
  void release(bool fail = false) {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ = true;
    release_fails_ = fail;
    changed_.notify_all();
  }
  bool released() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return released_;
  }
  // How many puts (successful or not) this key got.
  int puts_of(const BlockKey& key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = puts_.find(key);
    return it == puts_.end() ? 0 : it->second;
  }

  bool put(const BlockKey& key, uint32_t kind, std::span<const uint8_t> payload) override {
    std::unique_lock<std::mutex> lock(mutex_);
    ++puts_[key];
    bool fail = fail_;
    if (to_hold_ > 0) {
      --to_hold_;
      ++waiting_;
      changed_.notify_all();
      changed_.wait(lock, [&] { return released_; });
      --waiting_;
      fail = fail || release_fails_;
    }
    if (fail) return false;
    blocks_[key] = {kind, std::vector<uint8_t>(payload.begin(), payload.end())};
    return true;
  }
  std::optional<std::vector<uint8_t>> get(const BlockKey& key, uint32_t kind) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(key);
    if (it == blocks_.end() || it->second.first != kind) return std::nullopt;
    return it->second.second;
  }
  bool contains(const BlockKey& key) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return blocks_.count(key) != 0;
  }
  void clear_block(const BlockKey& key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    blocks_.erase(key);
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool fail_ = false, released_ = true, release_fails_ = false;
  int to_hold_ = 0, waiting_ = 0;
  std::unordered_map<BlockKey, std::pair<uint32_t, std::vector<uint8_t>>, BlockKeyHash> blocks_;
  std::unordered_map<BlockKey, int, BlockKeyHash> puts_;
};

}  // namespace hibana::test
