// Does a persistent decode kernel pay on this GPU? The 80B's decode step at batch 1 is a chain
// of ~640 small dependent kernels (docs/benchmarks.md): each product streams 2-25 MB, so what
// a kernel costs beyond its bytes (launch, ramp-up, the wait for the previous kernel, the tail)
// is most of the step. This tool times one chain of dependent matrix-vector products with the
// 80B DeltaNet layer's byte sizes, 36 layers of distinct weights, two ways over the same device
// function:
//
//   graph       one kernel per op, captured in a CUDA graph, programmatic dependent launch
//               (each CTA loads its weights before griddepcontrol.wait, and releases the next
//               kernel at its end: our kernels' way);
//   graph-early the same, each CTA releasing the next kernel as soon as its loads are issued
//               (before its wait);
//   graph-after-wait  the same, each CTA releasing the next kernel right after its wait (the
//               engine's kernels' way: pdl_start, and the decode matmul's release_early);
//               (so the next op's CTAs can start their loads while this op computes);
//   graph-ctr   one kernel per op as the graph way, ordered by completion counters instead of
//               griddepcontrol.wait: each CTA releases the next kernel at its start, loads its
//               weights, polls op i - 1's counter (acquire) until every tile of it is counted,
//               and counts its own tile (release) at its end. A CTA then waits for the tiles
//               it reads, not for the whole previous grid to end and flush. (No deadlock: the
//               next kernel launches only once every CTA of this one has started, so the CTAs a
//               poller waits for are resident.) The counters are zeroed at the head of each
//               replay (a memset node);
//   persistent  one cooperative kernel whose CTAs walk the ops in order: a CTA loads its tile of
//               op i's weights, then waits on op i-1's completion counter (acquire), reads its
//               input vector, computes, stores, and counts its tile (release). A CTA with no
//               tile in op i goes on to op i+1's weights at once: the weight stream need not
//               stop at a dependency;
//   persistent-late  the same, but each CTA waits before it loads its weights (what the
//               prefetch is worth);
//   ring        one CTA per SM, its (op, tile) pairs one cp.async pipeline through 6 tiles of
//               shared memory (op_chain_ring.cuh): the weights of the next tiles keep streaming
//               across the dependencies, which stall only the arithmetic — what a persistent
//               decode step could reach if it knew the experts in advance;
//   ring-routed the same, but an expert's weights start loading only once its router is done
//               (a decode step learns the experts from the router): what such a step can reach;
//   graph-early+L2 BUDGET  graph-early beside a one-warp prefetcher launched on a second
//               stream in the same graph: it pulls the coming ops' weights into L2
//               (cp.async.bulk.prefetch.L2), 2 MB at a time while at most BUDGET MB of
//               weights up to the piece's end are not yet consumed (0: an empty prefetcher,
//               the control), pacing itself on a progress word the chain's
//               kernels write (op i's first CTA, past its wait: ops before i are done). The chain
//               never waits on it, so its outputs are the graph's. If the chain's time is the gaps'
//               HBM ramp (each kernel's first loads a full DRAM round trip away), this runs near
//               the bare read; if it is the launches themselves, near graph-early;
//   graph-early+L2 ev D  the same prefetches paced by the graph instead of a progress word
//               (what the engine could add without touching its kernels): op j's prefetch is
//               a one-warp kernel on the second stream that depends on op j - D's completion
//               (an event recorded after it), so it runs while ops j - D + 1 .. j - 1 do;
//               `known` leaves the experts' products out (an engine learns which experts
//               only from the router): what prefetching the rest is worth;
//
// beside a bare read of every weight byte (the stream a step cannot beat) and the copy
// bandwidth. SMALL=1 puts two one-CTA ops in each layer (a norm after the mixer and after the
// experts: the step's add+norm, routing, combine kernels). Both ways run the same arithmetic in
// the same order, so their outputs must be identical: before each way's first run every
// output is set to NaN, and after it every output is compared with the graph's.
//
// Weights are bf16 with the byte size of the 80B's fp8 matrices (a row of K fp8 bytes is K/2
// bf16 values): the question is the chain's overhead, not fp8's conversion
// (tools/gpu/gemv_variants.sh prices that). Not part of the build:
//   nvcc -O3 -std=c++17 -arch=sm_90 -o op_chain tools/gpu/op_chain.cu && ./op_chain
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_timing.cuh"

namespace {

constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kWarpBytes = 4096;               // weight bytes per warp and tile
constexpr int kLaneChunks = kWarpBytes / 512;  // 16-byte loads per lane, all in flight at once
constexpr int kMaxK = 2048;                    // input elements (bf16 columns) of any op

struct Op {
  const uint4* w;  // [n][k] bf16, rows contiguous
  int n, k;        // rows; columns (bf16 elements); k * 2 divides kWarpBytes or is a multiple
  int rows_per_warp;
  int tiles;       // ceil(n / (kWarps * rows_per_warp)); 1 for a norm
  bool norm;       // a one-CTA op: out = x / rms(x) over n = k values
  bool routed;     // the experts' products (which experts: known only once the router has run)
  int router;      // a routed op's router (the op whose completion says which experts)
  const float* x;  // input vector (the previous op's output)
  float* out;      // [n]
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "op_chain needs sm_90 (programmatic dependent launch)"
#endif
__device__ __forceinline__ void pdl_wait() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}
__device__ __forceinline__ void pdl_trigger() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// Completion counters 128 bytes apart (pollers of one op's counter do not share its line with
// the next op's adds).
constexpr int kCounterStride = 32;

// The lane's weights of a tile: its 16-byte chunks j of the warp's kWarpBytes (rows_per_warp
// contiguous rows), all loads issued before any is used.
__device__ __forceinline__ void load_tile(const Op& op, int tile, uint4 (&w)[kLaneChunks]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = (static_cast<int64_t>(tile) * kWarps + warp) * op.rows_per_warp;
  const int64_t row_bytes = static_cast<int64_t>(op.k) * 2;
  const char* base = reinterpret_cast<const char*>(op.w) + row0 * row_bytes;
#pragma unroll
  for (int j = 0; j < kLaneChunks; ++j) {
    const int off = (j * 32 + lane) * 16;
    const int64_t row = row0 + off / row_bytes;
    w[j] = row < op.n ? __ldcs(reinterpret_cast<const uint4*>(base + off)) : make_uint4(0, 0, 0, 0);
  }
}

// The input vector into shared memory (from L2: another CTA wrote it).
__device__ __forceinline__ void load_x(const Op& op, float* xs) {
  for (int i = threadIdx.x; i < op.k; i += kThreads) xs[i] = __ldcg(op.x + i);
  __syncthreads();
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
  return v;
}

// The tile's outputs from the lane's weights and xs: each row's sum in a fixed order (per lane,
// chunks in order; then the warp's butterfly), whichever way the chain runs.
__device__ __forceinline__ void compute_tile(const Op& op, int tile, const uint4 (&w)[kLaneChunks],
                                             const float* xs) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = (static_cast<int64_t>(tile) * kWarps + warp) * op.rows_per_warp;
  const int row_bytes = op.k * 2;
  float acc[8] = {};
#pragma unroll
  for (int j = 0; j < kLaneChunks; ++j) {
    const int off = (j * 32 + lane) * 16;
    const int r = off / row_bytes, k0 = (off % row_bytes) / 2;
    const __nv_bfloat162* v = reinterpret_cast<const __nv_bfloat162*>(&w[j]);
    // The lane's 8 inputs as two 16-byte loads (k0 is a multiple of 8): lanes 8 floats apart
    // read one word each 8-way bank-conflicted, a float4 each 2-way.
    const float4 xa = *reinterpret_cast<const float4*>(xs + k0);
    const float4 xb = *reinterpret_cast<const float4*>(xs + k0 + 4);
    const float x8[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 f = __bfloat1622float2(v[e]);
      s = fmaf(f.x, x8[2 * e], s);
      s = fmaf(f.y, x8[2 * e + 1], s);
    }
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      if (q == r) acc[q] += s;
    }
  }
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    if (r >= op.rows_per_warp) break;  // (the same for the whole warp)
    const float sum = warp_sum(acc[r]);
    const int64_t row = row0 + r;
    if (lane == 0 && row < op.n) op.out[row] = sum;
  }
}

// A one-CTA op: out = x / sqrt(mean(x^2) + 1e-6), in a fixed order.
__device__ __forceinline__ void norm_op(const Op& op, const float* xs) {
  __shared__ float part[kWarps];
  float ss = 0.0f;
  for (int i = threadIdx.x; i < op.k; i += kThreads) ss = fmaf(xs[i], xs[i], ss);
  ss = warp_sum(ss);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
  __syncthreads();
  float total = 0.0f;
  for (int i = 0; i < kWarps; ++i) total += part[i];
  const float inv = 1.0f / sqrtf(total / static_cast<float>(op.k) + 1e-6f);
  for (int i = threadIdx.x; i < op.k; i += kThreads) op.out[i] = xs[i] * inv;
}

// When a graph-way kernel releases the next one.
enum Release : int { kAtEnd = 0, kBeforeWait = 1, kAfterWait = 2 };

// One op per launch (the graph way), releasing the next kernel at `release`. progress (null:
// none) gets `index` from the first CTA once it has waited: every op before this one is done.
__global__ void __launch_bounds__(kThreads)
    op_kernel(Op op, int release, unsigned* progress, unsigned index) {
  __shared__ __align__(16) float xs[kMaxK];
  uint4 w[kLaneChunks];
  if (!op.norm) load_tile(op, blockIdx.x, w);  // weights are constants: before the wait
  if (release == kBeforeWait) pdl_trigger();
  pdl_wait();
  if (release == kAfterWait) pdl_trigger();
  if (progress != nullptr && blockIdx.x == 0 && threadIdx.x == 0) {
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(progress), "r"(index) : "memory");
  }
  load_x(op, xs);
  if (op.norm) {
    norm_op(op, xs);
  } else {
    compute_tile(op, blockIdx.x, w, xs);
  }
  pdl_trigger();
}

// Thread 0 polls *counter (acquire) until it reaches want; then the whole CTA goes on.
__device__ __forceinline__ void wait_count(const unsigned* counter, unsigned want) {
  if (threadIdx.x == 0) {
    unsigned got;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(got) : "l"(counter) : "memory");
    } while (got < want);
  }
  __syncthreads();
}
// The CTA's tile counted in *counter (release), after every store of it.
__device__ __forceinline__ void count_tile(unsigned* counter) {
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
  }
}

// graph-ctr: op i of a chain (want: op i - 1's tiles), ordered by the counters done[].
__global__ void __launch_bounds__(kThreads)
    op_kernel_ctr(Op op, unsigned* done, int i, unsigned want) {
  __shared__ __align__(16) float xs[kMaxK];
  uint4 w[kLaneChunks];
  pdl_trigger();
  if (!op.norm) load_tile(op, blockIdx.x, w);
  wait_count(done + (i > 0 ? i - 1 : 0) * kCounterStride, i > 0 ? want : 0u);
  load_x(op, xs);
  if (op.norm) {
    norm_op(op, xs);
  } else {
    compute_tile(op, blockIdx.x, w, xs);
  }
  count_tile(done + i * kCounterStride);
}

// All ops in one cooperative launch. done[i] counts op i's finished tiles, cumulatively over
// runs: run `epoch` (1, 2, ...) waits for done[i - 1] >= epoch * tiles(i - 1).
__global__ void __launch_bounds__(kThreads)
    chain_kernel(const Op* ops, int n_ops, unsigned* done, unsigned epoch, bool late) {
  __shared__ __align__(16) float xs[kMaxK];
  for (int i = 0; i < n_ops; ++i) {
    const Op op = ops[i];
    for (int tile = blockIdx.x; tile < op.tiles; tile += gridDim.x) {
      uint4 w[kLaneChunks];
      if (!op.norm && !late) load_tile(op, tile, w);
      const unsigned want = i > 0 ? epoch * static_cast<unsigned>(ops[i - 1].tiles) : 0u;
      wait_count(done + (i > 0 ? i - 1 : 0) * kCounterStride, want);
      if (!op.norm && late) load_tile(op, tile, w);
      load_x(op, xs);
      if (op.norm) {
        norm_op(op, xs);
      } else {
        compute_tile(op, tile, w, xs);
      }
      count_tile(done + i * kCounterStride);
    }
  }
}

#include "op_chain_ring.cuh"

// The weights of op i: bytes from `at`, whose offset from the first op's is start (a prefix
// sum over the ops; a norm has none).
struct Span {
  const char* at;
  unsigned long long start, bytes;
};
constexpr unsigned kPrefetchPiece = 64 << 10;  // bytes per bulk prefetch

// One warp, 2 MB at a time (a 64 KiB bulk prefetch a lane): a piece of the weights goes to L2
// once the weights not yet consumed (from op *progress on) up to its end are within `budget`
// bytes, or its op has started. Budget 0: nothing (the fork's cost alone, the control).
__global__ void prefetch_kernel(const Span* spans, int n_ops, const unsigned* progress,
                                unsigned long long budget) {
  if (budget == 0) return;
  constexpr unsigned long long kBatch = 32ull * kPrefetchPiece;
  for (int j = 0; j < n_ops; ++j) {
    const Span sp = spans[j];
    for (unsigned long long base = 0; base < sp.bytes; base += kBatch) {
      const unsigned long long end =
          sp.start + (sp.bytes - base < kBatch ? sp.bytes : base + kBatch);
      for (;;) {  // every lane polls alike (the same loads, the same answer)
        unsigned done;
        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(done) : "l"(progress) : "memory");
        if (static_cast<int>(done) >= j || end - spans[done].start <= budget) break;
        __nanosleep(200);
      }
      const unsigned long long off =
          base + threadIdx.x * static_cast<unsigned long long>(kPrefetchPiece);
      if (off < sp.bytes) {
        const unsigned len = static_cast<unsigned>(
            sp.bytes - off < kPrefetchPiece ? sp.bytes - off : kPrefetchPiece);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(sp.at + off), "r"(len)
                     : "memory");
      }
    }
  }
}

// One op's weights into L2: a warp's 64 KiB bulk prefetches (the graph-paced way).
__global__ void prefetch_span(Span sp) {
  for (unsigned long long off = threadIdx.x * static_cast<unsigned long long>(kPrefetchPiece);
       off < sp.bytes; off += 32ull * kPrefetchPiece) {
    const unsigned len =
        static_cast<unsigned>(sp.bytes - off < kPrefetchPiece ? sp.bytes - off : kPrefetchPiece);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(sp.at + off), "r"(len)
                 : "memory");
  }
}

__global__ void fill_bf16(__nv_bfloat16* w, size_t n, float amp, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    w[i] = __float2bfloat16(amp * (static_cast<float>(h & 0xffff) / 32768.0f - 1.0f));
  }
}

// Every weight byte once, four 16-byte loads in flight per thread.
__global__ void read_all(const uint4* p, size_t n, unsigned* sink) {
  unsigned acc = 0;
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  for (; i + 3 * step < n; i += 4 * step) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = __ldcs(p + i + u * step);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += step) acc ^= __ldcs(p + i).x;
  if (acc == 0x9e3779b9u) *sink = acc;
}

// Dynamic shared memory (unused) given to op_kernel and chain_kernel: CTAS_PER_SM=N caps how
// many of their CTAs share an SM, and so the weight bytes in flight per SM (32 KiB a CTA).
size_t g_cap_smem = 0;

// One op's kernel (a CTA per tile), a programmatic dependent launch on s.
template <typename... P, typename... A>
void launch_tiles(void (*kernel)(Op, P...), const Op& op, cudaStream_t s, A... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(op.tiles);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = g_cap_smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&cfg, kernel, op, args...));
}
void launch_op(const Op& op, int release, cudaStream_t s, unsigned* progress = nullptr,
               unsigned index = 0) {
  launch_tiles(op_kernel, op, s, release, progress, index);
}
// Op i of the graph-ctr way. The first op follows the counters' memset with an ordinary launch:
// it must not count before they are zeroed.
void launch_op_ctr(const Op& op, cudaStream_t s, unsigned* done, int i, unsigned want) {
  if (i == 0) {
    op_kernel_ctr<<<op.tiles, kThreads, g_cap_smem, s>>>(op, done, i, want);
    CHECK(cudaGetLastError());
  } else {
    launch_tiles(op_kernel_ctr, op, s, done, i, want);
  }
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const bool small = std::getenv("SMALL") && std::strcmp(std::getenv("SMALL"), "1") == 0;
  // (36 layers: 2.5 GB of weights, far past the 50 MB L2; a few layers would fit in it.)
  const int layers = std::max(1, std::getenv("LAYERS") ? std::atoi(std::getenv("LAYERS")) : 36);

  // One 80B DeltaNet layer at batch 1 in fp8 bytes per row (K) and rows (N): the in-projection,
  // the mixer's out-projection, the router (bf16: 4096 bytes a row), the 11 experts' stacked
  // gate/up (10 routed + the shared one), their down projections. bf16 columns = bytes / 2.
  struct Shape {
    int n, k_bytes;
    bool norm_after, routed;
  };
  const Shape layer[] = {{12352, 2048, false, false},
                         {2048, 4096, true, false},
                         {512, 4096, false, false},
                         {11264, 2048, false, true},
                         {22528, 512, true, true}};
  std::vector<Op> ops;
  size_t total_bytes = 0;
  for (int l = 0; l < layers; ++l) {
    for (const Shape& sh : layer) {
      Op op = {};
      op.n = sh.n;
      op.k = sh.k_bytes / 2;
      op.rows_per_warp = kWarpBytes / sh.k_bytes;
      op.tiles = (op.n + kWarps * op.rows_per_warp - 1) / (kWarps * op.rows_per_warp);
      op.routed = sh.routed;
      if (sh.routed) {
        op.router = static_cast<int>(ops.size());
        while (ops[op.router].norm || ops[op.router].n != 512) --op.router;
      }
      ops.push_back(op);
      total_bytes += static_cast<size_t>(op.n) * sh.k_bytes;
      if (small && sh.norm_after) {
        Op norm = {};
        norm.norm = true;
        norm.tiles = 1;
        ops.push_back(norm);
      }
    }
  }
  // Weights in one allocation (the bare read covers exactly them), 16-byte aligned per op.
  char* wbuf;
  CHECK(cudaMalloc(&wbuf, total_bytes));
  size_t at = 0;
  for (Op& op : ops) {
    if (op.norm) continue;
    op.w = reinterpret_cast<const uint4*>(wbuf + at);
    const size_t elems = static_cast<size_t>(op.n) * op.k;
    fill_bf16<<<1024, 256, 0, s>>>(reinterpret_cast<__nv_bfloat16*>(wbuf + at), elems,
                                   std::sqrt(3.0f / static_cast<float>(op.k)),
                                   static_cast<uint32_t>(at));
    at += elems * 2;
  }
  // Activations: op i reads the first k values of the latest output that has k (the experts
  // read the hidden state, not the router's 512 logits): done after op i - 1 implies done
  // after every op before it, in both ways. A norm keeps the width of the output before it.
  // One output buffer per op.
  std::vector<float*> outs(ops.size());
  float* x0;
  CHECK(cudaMalloc(&x0, kMaxK * 4));
  std::vector<float> ones(kMaxK, 1.0f);
  CHECK(cudaMemcpy(x0, ones.data(), kMaxK * 4, cudaMemcpyHostToDevice));
  for (size_t i = 0; i < ops.size(); ++i) {
    Op& op = ops[i];
    if (op.norm) op.n = op.k = i == 0 ? kMaxK : std::min(ops[i - 1].n, kMaxK);
    const size_t len = static_cast<size_t>(std::max(op.n, kMaxK));
    CHECK(cudaMalloc(&outs[i], len * 4));
    CHECK(cudaMemset(outs[i], 0, len * 4));
    op.out = outs[i];
    op.x = x0;
    for (size_t j = i; j-- > 0;) {
      if (ops[j].n >= op.k) {
        op.x = outs[j];
        break;
      }
    }
  }
  Op* d_ops;
  unsigned *done, *sink;
  CHECK(cudaMalloc(&d_ops, ops.size() * sizeof(Op)));
  CHECK(cudaMemcpy(d_ops, ops.data(), ops.size() * sizeof(Op), cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&done, ops.size() * kCounterStride * 4));
  CHECK(cudaMemset(done, 0, ops.size() * kCounterStride * 4));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaDeviceSynchronize());

  void *cs, *cd;
  const size_t copy_bytes = size_t(512) << 20;
  CHECK(cudaMalloc(&cs, copy_bytes));
  CHECK(cudaMalloc(&cd, copy_bytes));
  const double copy = copy_gbs(s, cd, cs, copy_bytes);
  int runtime = 0;
  CHECK(cudaRuntimeGetVersion(&runtime));
  std::printf(
      "%s, %d SMs, CUDA runtime %d, copy bandwidth %.1f GB/s (read + write, as hibana "
      "counts it); %d layers, %zu ops (%s), %.1f MB of weights\n",
      prop.name, prop.multiProcessorCount, runtime, copy, layers, ops.size(),
      small ? "with one-CTA ops" : "products only", total_bytes / 1e6);
  auto report = [&](const char* what, float us) {
    const double gbs = static_cast<double>(total_bytes) / (us * 1e-6) / 1e9;
    std::printf("%-22s %9.1f us  %7.2f us/op  %8.1f GB/s of weights  %5.1f%% of copy\n", what, us,
                us / static_cast<float>(ops.size()), gbs, 100.0 * gbs / copy);
  };
  // Every output NaN (before a way's first run), and every output against the graph's (after).
  auto poison = [&] {
    for (size_t i = 0; i < ops.size(); ++i) {
      const size_t len = static_cast<size_t>(std::max(ops[i].n, kMaxK));
      CHECK(cudaMemsetAsync(outs[i], 0xff, len * 4, s));
    }
    CHECK(cudaStreamSynchronize(s));
  };
  auto snapshot = [&] {
    std::vector<std::vector<float>> all(ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      all[i].resize(static_cast<size_t>(ops[i].n));
      CHECK(cudaMemcpy(all[i].data(), outs[i], all[i].size() * 4, cudaMemcpyDeviceToHost));
    }
    return all;
  };

  if (const char* cap = std::getenv("CTAS_PER_SM")) {
    // The SM's shared memory split CTAS_PER_SM ways, less each CTA's static xs and the 1 KiB
    // the runtime reserves per CTA.
    const int n = std::max(1, std::atoi(cap));
    g_cap_smem = prop.sharedMemPerMultiprocessor / n - sizeof(float) * kMaxK - 1024 - 128;
    g_cap_smem = std::min(g_cap_smem, prop.sharedMemPerBlockOptin - sizeof(float) * kMaxK);
    CHECK(cudaFuncSetAttribute(op_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(g_cap_smem)));
    CHECK(cudaFuncSetAttribute(chain_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(g_cap_smem)));
    CHECK(cudaFuncSetAttribute(op_kernel_ctr, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(g_cap_smem)));
  }
  const float bare = graph_us(s, 1, [&] {
    read_all<<<prop.multiProcessorCount * 4, 512, 0, s>>>(reinterpret_cast<const uint4*>(wbuf),
                                                          total_bytes / 16, sink);
  });
  report("bare read", bare);

  int graph_per_sm = 0, per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&graph_per_sm, op_kernel, kThreads,
                                                      g_cap_smem));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, chain_kernel, kThreads,
                                                      g_cap_smem));
  std::vector<std::vector<float>> ref;
  int failures = 0;
  auto compare = [&](const std::string& what) {
    const std::vector<std::vector<float>> got = snapshot();
    size_t bad = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (std::memcmp(got[i].data(), ref[i].data(), got[i].size() * 4) != 0) ++bad;
    }
    std::printf("  %s: %s\n", what.c_str(),
                bad == 0 ? "every output identical to the graph's"
                         : (std::to_string(bad) + " outputs DIFFER from the graph's").c_str());
    if (bad != 0) ++failures;
  };
  for (const int release : {kAtEnd, kBeforeWait, kAfterWait}) {
    const char* what = release == kAtEnd        ? "graph"
                       : release == kBeforeWait ? "graph-early"
                                                : "graph-after-wait";
    poison();
    const float graph = graph_us(s, 1, [&] {
      for (const Op& op : ops) launch_op(op, release, s);
    });
    report(what, graph);
    if (release == kAtEnd) {
      ref = snapshot();
      size_t nan = 0;
      for (const auto& o : ref) {
        nan +=
            static_cast<size_t>(std::count_if(o.begin(), o.end(), [](float v) { return v != v; }));
      }
      std::printf("  %d CTAs per SM; %zu NaN outputs%s\n", graph_per_sm, nan,
                  nan ? " (a tile was never written)" : "");
      if (nan) ++failures;
    } else {
      compare(what);
    }
  }

  {  // graph-ctr (the counters zeroed again after: the persistent ways count from 0)
    poison();
    const size_t counter_bytes = ops.size() * kCounterStride * 4;
    const float ctr = graph_us(s, 1, [&] {
      CHECK(cudaMemsetAsync(done, 0, counter_bytes, s));
      for (size_t i = 0; i < ops.size(); ++i) {
        launch_op_ctr(ops[i], s, done, static_cast<int>(i),
                      i > 0 ? static_cast<unsigned>(ops[i - 1].tiles) : 0u);
      }
    });
    report("graph-ctr", ctr);
    compare("graph-ctr");
    CHECK(cudaMemsetAsync(done, 0, counter_bytes, s));
    CHECK(cudaStreamSynchronize(s));
  }

  // graph-early beside the L2 prefetcher, for each budget of PREFETCH_MB (MB, default "0 8 16
  // 32"; 0 forks and joins an empty prefetcher: the structure's own cost). NO_L2=1 skips these
  // ways (ruled out: docs/benchmarks.md, sixteenth slice).
  if (!std::getenv("NO_L2") || std::string(std::getenv("NO_L2")) == "0") {
    std::vector<Span> spans(ops.size());
    unsigned long long start = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      const unsigned long long bytes =
          ops[i].norm ? 0 : static_cast<unsigned long long>(ops[i].n) * ops[i].k * 2;
      spans[i] = {reinterpret_cast<const char*>(ops[i].w), start, bytes};
      start += bytes;
    }
    Span* d_spans;
    unsigned* progress;
    CHECK(cudaMalloc(&d_spans, spans.size() * sizeof(Span)));
    CHECK(cudaMemcpy(d_spans, spans.data(), spans.size() * sizeof(Span), cudaMemcpyHostToDevice));
    CHECK(cudaMalloc(&progress, 4));
    cudaStream_t side;
    cudaEvent_t fork, join;
    CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    const char* env = std::getenv("PREFETCH_MB");
    const std::string budgets = env ? env : "0 8 16 32";
    size_t pos = 0;
    while (pos < budgets.size()) {
      const size_t end = std::min(budgets.find(' ', pos), budgets.size());
      const std::string item = budgets.substr(pos, end - pos);
      pos = end + 1;
      if (item.empty()) continue;
      const unsigned long long budget = std::stoull(item) << 20;
      poison();
      const float us = graph_us(s, 1, [&] {
        CHECK(cudaMemsetAsync(progress, 0, 4, s));
        CHECK(cudaEventRecord(fork, s));
        CHECK(cudaStreamWaitEvent(side, fork, 0));
        prefetch_kernel<<<1, 32, 0, side>>>(d_spans, static_cast<int>(ops.size()), progress,
                                            budget);
        CHECK(cudaGetLastError());
        CHECK(cudaEventRecord(join, side));
        for (size_t i = 0; i < ops.size(); ++i)
          launch_op(ops[i], kBeforeWait, s, progress, static_cast<unsigned>(i));
        CHECK(cudaStreamWaitEvent(s, join, 0));
      });
      const std::string what = "graph-early+L2 " + item;
      report(what.c_str(), us);
      compare(what);
    }
    // Paced by the graph: an event after each op; op j's prefetch waits for op j - D's. `known`:
    // the experts' products are not prefetched (an engine knows which experts only once the
    // router has run: what is left without them).
    std::vector<cudaEvent_t> after(ops.size());
    for (cudaEvent_t& e : after) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    for (const std::pair<int, bool> way : {std::pair{2, false}, {3, false}, {2, true}}) {
      const int D = way.first;
      const bool known = way.second;
      auto wanted = [&](size_t j) { return spans[j].bytes > 0 && !(known && ops[j].routed); };
      poison();
      const float us = graph_us(s, 1, [&] {
        CHECK(cudaEventRecord(fork, s));
        CHECK(cudaStreamWaitEvent(side, fork, 0));
        for (size_t j = 0; j < ops.size() && static_cast<int>(j) < D; ++j) {
          if (wanted(j)) prefetch_span<<<1, 32, 0, side>>>(spans[j]);
        }
        CHECK(cudaGetLastError());
        for (size_t i = 0; i < ops.size(); ++i) {
          launch_op(ops[i], kBeforeWait, s);
          CHECK(cudaEventRecord(after[i], s));
          const size_t j = i + D;  // op i done: prefetch op i + D
          if (j < ops.size() && wanted(j)) {
            CHECK(cudaStreamWaitEvent(side, after[i], 0));
            prefetch_span<<<1, 32, 0, side>>>(spans[j]);
            CHECK(cudaGetLastError());
          }
        }
        CHECK(cudaEventRecord(join, side));
        CHECK(cudaStreamWaitEvent(s, join, 0));
      });
      const std::string what = "graph-early+L2 ev " + std::to_string(D) + (known ? " known" : "");
      report(what.c_str(), us);
      compare(what);
    }
  }

  const int grid = per_sm * prop.multiProcessorCount;
  unsigned epoch = 0;
  for (bool late : {false, true}) {
    auto run = [&] {
      ++epoch;
      int n_ops = static_cast<int>(ops.size());
      void* args[] = {&d_ops, &n_ops, &done, &epoch, &late};
      CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(chain_kernel), dim3(grid),
                                        dim3(kThreads), args, g_cap_smem, s));
    };
    poison();
    run();
    CHECK(cudaStreamSynchronize(s));
    compare(std::string(late ? "persistent-late" : "persistent") + " (" + std::to_string(grid) +
            " CTAs, " + std::to_string(per_sm) + " per SM)");
    const float ms = best_ms(s, run);
    report(late ? "persistent-late" : "persistent", ms * 1000.0f);
  }
  CHECK(cudaFuncSetAttribute(ring_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kRingSmem));
  int ring_per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ring_per_sm, ring_kernel<false>, kThreads,
                                                      kRingSmem));
  CHECK(cudaFuncSetAttribute(ring_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kRingSmem));
  if (ring_per_sm > 0) {
    // One CTA per SM unless RING_CTAS says more (fewer tiles would fit several).
    const int ring_ctas = std::getenv("RING_CTAS") ? std::atoi(std::getenv("RING_CTAS")) : 1;
    const int ring_grid = std::max(1, std::min(ring_per_sm, ring_ctas)) * prop.multiProcessorCount;
    for (const bool routed : {false, true}) {
      auto run = [&] {
        ++epoch;
        int n_ops = static_cast<int>(ops.size());
        void* args[] = {&d_ops, &n_ops, &done, &epoch};
        void* kernel = routed ? reinterpret_cast<void*>(ring_kernel<true>)
                              : reinterpret_cast<void*>(ring_kernel<false>);
        CHECK(cudaLaunchCooperativeKernel(kernel, dim3(ring_grid), dim3(kThreads), args,
                                          kRingSmem, s));
      };
      const char* what = routed ? "ring-routed" : "ring";
      poison();
      run();
      CHECK(cudaStreamSynchronize(s));
      compare(std::string(what) + " (" + std::to_string(ring_grid) + " CTAs, " +
              std::to_string(kRingTiles) + " tiles of 32 KiB each)");
      report(what, best_ms(s, run) * 1000.0f);
    }
  } else {
    std::printf("ring: %d KiB of shared memory per CTA do not fit this GPU\n", kRingSmem >> 10);
  }
  return failures == 0 ? 0 : 1;
}
