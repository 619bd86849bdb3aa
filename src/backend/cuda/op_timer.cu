// The op timer (op_timer.h).
#include "backend/cuda/op_timer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/common.cuh"

namespace hibana::cuda {

OpTimer::OpTimer() {
  const char* env = std::getenv("HIBANA_CUDA_TIMING");
  on_ = env && *env && std::string(env) != "0";
}

cudaEvent_t OpTimer::event() {
  if (!free_.empty()) {
    cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }
  cudaEvent_t e;
  HIBANA_CUDA(cudaEventCreate(&e));
  return e;
}

std::string OpTimer::report() {
  HIBANA_CUDA(cudaStreamSynchronize(stream()));
  for (const Pending& p : pending_) {
    float ms = 0;
    HIBANA_CUDA(cudaEventElapsedTime(&ms, p.a, p.b));
    Total& t = totals_[p.op];
    t.ms += ms;
    ++t.calls;
    free_.push_back(p.a);
    free_.push_back(p.b);
  }
  pending_.clear();
  double all = 0;
  for (const auto& [op, t] : totals_) all += t.ms;
  std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](auto& x, auto& y) { return x.second.ms > y.second.ms; });
  std::string out;
  char line[160];
  for (const auto& [op, t] : rows) {
    std::snprintf(line, sizeof line, "  %-20s %10.3f ms %6.1f%% %8lld calls\n", op.c_str(), t.ms,
                  all > 0 ? 100.0 * t.ms / all : 0.0, static_cast<long long>(t.calls));
    out += line;
  }
  totals_.clear();
  return out;
}

Timed::Timed(OpTimer& t, const char* op) : t_(t), op_(op) {
  if (!t_.on()) return;
  a_ = t_.event();
  HIBANA_CUDA(cudaEventRecord(a_, stream()));
}

Timed::~Timed() {
  if (!t_.on()) return;
  cudaEvent_t b = t_.event();
  warn_cuda(cudaEventRecord(b, stream()), "cudaEventRecord (op timer)");
  t_.record(op_, a_, b);
}

}  // namespace hibana::cuda
