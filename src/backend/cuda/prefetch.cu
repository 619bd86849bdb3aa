// Backend::prefetch on CUDA (HIBANA_CUDA_L2_PREFETCH=1; off): while a decode step is recorded,
// the weights a later product reads are pulled into L2 by a one-warp kernel on a second stream,
// forked from the recording stream where the call stands (so it starts once the op queued
// before it has finished) and joined back at the end of the recording. The chain of dependent
// kernels leaves the memory idle between products (tools/gpu/op_chain.cu measures by how much);
// a prefetch was to keep it streaming there. It made the 80B's decode twice as slow at batch 1,
// and op_chain's chain four times however it was paced (docs/benchmarks.md, sixteenth slice).
// Nothing waits for a prefetch and nothing reads what it moves but the products that read the
// weights anyway: results do not change.
#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

namespace hibana::cuda {

namespace {

constexpr int kMaxSpans = 8;
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
  constexpr unsigned kPiece = 64 << 10;  // bytes per bulk prefetch
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

// The recording thread's second stream and its fork and join events (made at its first
// prefetch), and whether the stream has work its recording must join.
struct Side {
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
};
thread_local bool t_pending = false;

// Null where the stream or its events could not be made (the hint is then dropped).
Side* side() {
  thread_local Side s;
  thread_local bool made = [] {
    return cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking) == cudaSuccess &&
           cudaEventCreateWithFlags(&s.fork, cudaEventDisableTiming) == cudaSuccess &&
           cudaEventCreateWithFlags(&s.join, cudaEventDisableTiming) == cudaSuccess;
  }();
  if (!made) cudaGetLastError();
  return made ? &s : nullptr;
}

}  // namespace

// A hint: every failure is reported and dropped, never thrown (a throw inside a recording
// would cost the step its graph).
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
  Side* x = s.n > 0 ? side() : nullptr;
  if (x == nullptr) return;
  cudaError_t e = cudaEventRecord(x->fork, stream());
  if (e == cudaSuccess) e = cudaStreamWaitEvent(x->stream, x->fork, 0);
  if (e == cudaSuccess) {
    t_pending = true;  // the side stream is in the recording now: join it, launch or not
    prefetch_kernel<<<1, 32, 0, x->stream>>>(s);
    e = cudaGetLastError();
  }
  warn_cuda(e, "L2 prefetch");
}

// Never throws: the recording must reach cudaStreamEndCapture, which reports what failed.
void join_prefetches() {
  if (!t_pending) return;
  t_pending = false;
  Side* x = side();
  cudaError_t e = cudaEventRecord(x->join, x->stream);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(stream(), x->join, 0);
  warn_cuda(e, "joining the L2 prefetches");
}

}  // namespace hibana::cuda
