#include "backend/cuda/host_copies.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

#include "backend/cuda/common.cuh"
#include "core/log.h"

namespace hibana::cuda::host_copies {

namespace {

constexpr size_t kStagingBytes = size_t(64) << 20;
constexpr size_t kPinnedCacheBytes = size_t(256) << 20;

class Copier {
 public:
  void copy_batch(const std::vector<ByteCopy>& copies, bool to_host) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (host_side_pinned(copies, to_host)) return copy_direct(copies, to_host);
    size_t i = 0;
    while (i < copies.size()) {
      size_t j = i, bytes = 0;
      while (j < copies.size() && bytes + copies[j].bytes <= kStagingBytes)
        bytes += copies[j++].bytes;
      if (j == i || !reserve(bytes)) {  // larger than the staging, or no pinned memory
        copy_one(copies[i]);
        ++i;
        continue;
      }
      size_t off = 0;
      if (!to_host) {
        for (size_t k = i; k < j; off += copies[k++].bytes) {
          if (copies[k].bytes) std::memcpy(staging_ + off, copies[k].src, copies[k].bytes);
        }
      }
      start_after_compute();
      off = 0;
      for (size_t k = i; k < j; off += copies[k++].bytes) {
        const ByteCopy& c = copies[k];
        if (c.bytes == 0) continue;
        HIBANA_CUDA(cudaMemcpyAsync(to_host ? staging_ + off : c.dst,
                                    to_host ? c.src : staging_ + off, c.bytes, kind(to_host),
                                    copy_stream_));
      }
      finish(to_host);
      if (to_host) {
        off = 0;
        for (size_t k = i; k < j; off += copies[k++].bytes) {
          if (copies[k].bytes) std::memcpy(copies[k].dst, staging_ + off, copies[k].bytes);
        }
      }
      i = j;
    }
  }

  // Reused by size: state blocks come in a few sizes, and cudaHostAlloc / cudaFreeHost are
  // slow (the latter synchronises the device).
  void* allocate_pinned(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(pinned_mutex_);
      auto it = pinned_free_.find(bytes);
      if (it != pinned_free_.end()) {
        void* p = it->second;
        pinned_free_.erase(it);
        pinned_cached_ -= bytes;
        return p;
      }
    }
    void* p = nullptr;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return p;
  }

  void release_pinned(void* p, size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(pinned_mutex_);
      if (pinned_cached_ + bytes <= kPinnedCacheBytes) {
        pinned_free_.emplace(bytes, p);
        pinned_cached_ += bytes;
        return;
      }
    }
    warn_cuda(cudaFreeHost(p), "cudaFreeHost");
  }

 private:
  static cudaMemcpyKind kind(bool to_host) {
    return to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
  }

  // True when every copy's host side is page-locked memory (no staging needed).
  static bool host_side_pinned(const std::vector<ByteCopy>& copies, bool to_host) {
    for (const ByteCopy& c : copies) {
      cudaPointerAttributes a{};
      if (cudaPointerGetAttributes(&a, to_host ? c.dst : c.src) != cudaSuccess) {
        cudaGetLastError();
        return false;
      }
      if (a.type != cudaMemoryTypeHost) return false;
    }
    return !copies.empty();
  }

  void copy_one(const ByteCopy& c) {
    HIBANA_CUDA(cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDefault, stream()));
    HIBANA_CUDA(cudaStreamSynchronize(stream()));
  }

  // The copy stream waits for the compute stream's queued work.
  void start_after_compute() {
    if (!copy_stream_) {
      HIBANA_CUDA(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
      HIBANA_CUDA(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
      HIBANA_CUDA(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    }
    HIBANA_CUDA(cudaEventRecord(ready_, stream()));
    HIBANA_CUDA(cudaStreamWaitEvent(copy_stream_, ready_, 0));
  }

  // Copies to the device: the compute stream's later work waits for them. Then the host waits
  // for the copy stream (its buffers may be reused or freed once this returns).
  void finish(bool to_host) {
    if (!to_host) {
      HIBANA_CUDA(cudaEventRecord(done_, copy_stream_));
      HIBANA_CUDA(cudaStreamWaitEvent(stream(), done_, 0));
    }
    HIBANA_CUDA(cudaStreamSynchronize(copy_stream_));
  }

  void copy_direct(const std::vector<ByteCopy>& copies, bool to_host) {
    start_after_compute();
    for (const ByteCopy& c : copies) {
      if (c.bytes) HIBANA_CUDA(cudaMemcpyAsync(c.dst, c.src, c.bytes, kind(to_host), copy_stream_));
    }
    finish(to_host);
  }

  // Pinned staging of at least `bytes`; false when no page-locked memory can be had.
  bool reserve(size_t bytes) {
    if (bytes <= staging_bytes_) return true;
    if (no_pinned_) return false;
    const size_t want =
        std::max(bytes, std::min(kStagingBytes, std::max(staging_bytes_ * 2, size_t(1) << 20)));
    void* p = nullptr;
    if (cudaHostAlloc(&p, want, cudaHostAllocDefault) != cudaSuccess) {
      cudaGetLastError();
      no_pinned_ = true;  // not asked again for every copy that follows
      log_warn("no page-locked host memory for staging state copies: copying directly");
      return false;
    }
    if (staging_) HIBANA_CUDA(cudaFreeHost(staging_));
    staging_ = static_cast<uint8_t*>(p);
    staging_bytes_ = want;
    return true;
  }

  std::mutex mutex_;         // copies
  std::mutex pinned_mutex_;  // the pinned cache (buffers are released from any thread)
  std::multimap<size_t, void*> pinned_free_;
  size_t pinned_cached_ = 0;
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  uint8_t* staging_ = nullptr;
  size_t staging_bytes_ = 0;
  bool no_pinned_ = false;
};

Copier& copier() {
  static Copier* c = new Copier;  // never destroyed: buffers may be released during exit
  return *c;
}

}  // namespace

void copy_batch(const std::vector<ByteCopy>& copies, bool to_host) {
  copier().copy_batch(copies, to_host);
}

void* allocate_pinned(size_t bytes) {
  return copier().allocate_pinned(bytes);
}

void release_pinned(void* p, size_t bytes) {
  copier().release_pinned(p, bytes);
}

}  // namespace hibana::cuda::host_copies
