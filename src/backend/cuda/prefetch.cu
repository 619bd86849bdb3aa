// Backend::prefetch on CUDA (HIBANA_CUDA_L2_PREFETCH=1, off until measured): while a decode
// step is recorded, the weights a later product reads are pulled into L2 by a one-warp kernel on
// a second stream, forked from the recording stream where the call stands (so it starts once
// the op queued before it has finished) and joined back at the end of the recording. The chain
// of dependent kernels leaves the memory idle between products (tools/gpu/op_chain.cu measures
// by how much); a prefetch keeps it streaming there. Nothing waits for a prefetch and nothing
// reads what it moves but the products that read the weights anyway: results do not change.
#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

namespace hibana::cuda {

namespace {

constexpr int kMaxSpans = 8;
constexpr unsigned kPiece = 64 << 10;  // bytes per bulk prefetch
// Larger matrices are not prefetched: they cannot sit in the 50 MB L2 beside the stream of the
// products in between (the 8B's MLP, 200 MB) and stream at full speed on their own.
constexpr size_t kMaxSpanBytes = size_t(32) << 20;

struct Spans {
  const char* at[kMaxSpans];
  unsigned long long bytes[kMaxSpans];
  int n;
};

// A warp issues the spans' 64 KiB bulk prefetches into L2 (sm_90: cp.async.bulk.prefetch; an
// older GPU does nothing) and ends; the prefetches go on without it.
__global__ void prefetch_kernel(Spans s) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  for (int i = 0; i < s.n; ++i) {
    for (unsigned long long off = threadIdx.x * static_cast<unsigned long long>(kPiece);
         off < s.bytes[i]; off += 32ull * kPiece) {
      const unsigned long long left = s.bytes[i] - off;
      const unsigned len = static_cast<unsigned>(left < kPiece ? left : kPiece);
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(s.at[i] + off), "r"(len)
                   : "memory");
    }
  }
#endif
}

// The recording thread's second stream and its fork and join events, and whether the stream
// has work the recording must join.
struct Side {
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  bool pending = false;
};

Side& side() {
  thread_local Side s = [] {
    Side x;
    HIBANA_CUDA(cudaStreamCreateWithFlags(&x.stream, cudaStreamNonBlocking));
    HIBANA_CUDA(cudaEventCreateWithFlags(&x.fork, cudaEventDisableTiming));
    HIBANA_CUDA(cudaEventCreateWithFlags(&x.join, cudaEventDisableTiming));
    return x;
  }();
  return s;
}

}  // namespace

void prefetch_l2(std::initializer_list<const Weight*> weights) {
  Spans s{};
  for (const Weight* w : weights) {
    if (w == nullptr || w->w.empty() || w->w.device != Device::cuda) continue;
    const size_t bytes = w->w.nbytes();
    // 16-byte multiples from a 16-byte aligned start (what the instruction takes).
    const uintptr_t at = reinterpret_cast<uintptr_t>(w->w.data);
    if (bytes < 16 || bytes > kMaxSpanBytes || at % 16 != 0 || s.n == kMaxSpans) continue;
    s.at[s.n] = static_cast<const char*>(w->w.data);
    s.bytes[s.n] = bytes / 16 * 16;
    ++s.n;
  }
  if (s.n == 0) return;
  Side& x = side();
  HIBANA_CUDA(cudaEventRecord(x.fork, stream()));
  HIBANA_CUDA(cudaStreamWaitEvent(x.stream, x.fork, 0));
  prefetch_kernel<<<1, 32, 0, x.stream>>>(s);
  launched("prefetch_kernel");
  x.pending = true;
}

void join_prefetches() {
  Side& x = side();
  if (!x.pending) return;
  HIBANA_CUDA(cudaEventRecord(x.join, x.stream));
  HIBANA_CUDA(cudaStreamWaitEvent(stream(), x.join, 0));
  x.pending = false;
}

}  // namespace hibana::cuda
