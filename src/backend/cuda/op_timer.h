// The CUDA backend's op timer: with HIBANA_CUDA_TIMING=1 every op is bracketed by events and
// report() sums the GPU time per op (the breakdown behind the benchmark figures).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace hibana::cuda {

class OpTimer {
 public:
  OpTimer();  // on when HIBANA_CUDA_TIMING is set and not 0
  bool on() const { return on_; }
  void record(const char* op, cudaEvent_t a, cudaEvent_t b) { pending_.push_back({op, a, b}); }
  cudaEvent_t event();  // a free event (created when none is)
  // Per op since the last report, slowest first: time, share, calls. Waits for the stream.
  std::string report();

 private:
  struct Pending {
    const char* op;
    cudaEvent_t a, b;
  };
  struct Total {
    double ms = 0;
    int64_t calls = 0;
  };
  bool on_ = false;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> free_;
  std::map<std::string, Total> totals_;
};

// Times the ops queued in its scope under `op` (nothing when the timer is off).
class Timed {
 public:
  Timed(OpTimer& t, const char* op);
  ~Timed();
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  OpTimer& t_;
  const char* op_;
  cudaEvent_t a_{};
};

}  // namespace hibana::cuda
