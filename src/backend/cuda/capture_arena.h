// Private to cuda_backend.cu: the memory the ops recorded into a CUDA graph take.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>

namespace hibana::cuda {

// Memory for the ops recorded into a graph. Stream-ordered allocations would become memory
// nodes of the graph, between its kernels, and a kernel edge through such a node loses its
// programmatic launch; so while recording, buffers come from this arena instead: chunks of
// device memory kept for the life of the program (a graph replays at the addresses it
// recorded), handed out first-fit and reused once freed. Reuse between ops is safe because
// the stream orders them and launch_pdl kernels wait before touching memory another op uses;
// graphs never replay concurrently. A recording that does not fit takes stream-ordered
// memory for the rest (correct, just without programmatic edges there) and the arena grows
// before the next recording.
class CaptureArena {
 public:
  void* allocate(size_t bytes) {
    std::lock_guard<std::mutex> lock(m_);
    const size_t need = round(bytes);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < need) continue;
      const uintptr_t at = it->first;
      const size_t left = it->second - need;
      free_.erase(it);
      if (left) free_[at + need] = left;
      used_[at] = need;
      in_use_ += need;
      peak_ = std::max(peak_, in_use_);
      return reinterpret_cast<void*>(at);
    }
    short_ = std::max(short_, in_use_ + need);
    return nullptr;
  }
  // False when p is not the arena's.
  bool release(void* p) {
    std::lock_guard<std::mutex> lock(m_);
    auto it = used_.find(reinterpret_cast<uintptr_t>(p));
    if (it == used_.end()) return false;
    uintptr_t at = it->first;
    size_t size = it->second;
    in_use_ -= size;
    used_.erase(it);
    auto next = free_.lower_bound(at);
    if (next != free_.end() && next->first == at + size && same_chunk(at, next->first)) {
      size += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == at && same_chunk(prev->first, at)) {
        prev->second += size;
        return true;
      }
    }
    free_[at] = size;
    return true;
  }
  // Before a recording (not during one): room for the largest need seen so far.
  void reserve() {
    std::lock_guard<std::mutex> lock(m_);
    const size_t want = std::max<size_t>(short_, size_t(64) << 20);
    if (capacity_ >= want) return;
    const size_t add = round(want - capacity_);
    void* p = nullptr;
    if (cudaMalloc(&p, add) != cudaSuccess) {
      cudaGetLastError();
      return;  // recordings keep using stream-ordered memory
    }
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    chunks_[at] = add;
    free_[at] = add;
    capacity_ += add;
  }

 private:
  static size_t round(size_t b) { return (std::max<size_t>(b, 1) + 255) / 256 * 256; }
  bool same_chunk(uintptr_t a, uintptr_t b) const {
    auto it = chunks_.upper_bound(a);
    if (it == chunks_.begin()) return false;
    --it;
    return b >= it->first && b < it->first + it->second;
  }
  std::mutex m_;
  std::map<uintptr_t, size_t> chunks_, free_, used_;
  size_t capacity_ = 0, in_use_ = 0, peak_ = 0, short_ = 0;
};

}  // namespace hibana::cuda
