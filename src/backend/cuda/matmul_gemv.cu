// Decode matmul: out = x · wᵀ for up to 8 token rows (per group), bf16 or fp8 weights, on the
// tensor cores with the same arithmetic as matmul_mma.cu and matmul_tiled.cu (the same splits,
// the same mma sequence per output element, the same three-term split of the activations), so
// a token's bits do not depend on which kernel served its batch.
//
// Built to stream the weights with nothing in the way: each lane copies its 16 bytes of rows
// g and g + 8 per chunk with cp.async into its own slots of a warp-private ring (D - 1 stages
// in flight), and loads the activations it multiplies — those of token g, at the k positions
// of its weight bytes — straight from global memory (they sit in L2) one stage ahead into
// registers, splitting them itself. No lane reads what another copied, so the main loop has no
// barrier of any kind; warps run independently, and the only CTA-wide step is the split
// reduction at the end.
//
// With programmatic dependent launch the weight ring starts filling before the kernel waits
// for the previous one (plain matrices: the weights are constants), and the next kernel is
// released once every CTA has finished its loads.
//
// Measured against the kernel it replaced (one barrier per stage; docs/benchmarks.md, fifth
// slice): no faster per call — what a call costs beyond its bytes is start-up and the split
// reduction, not the barrier. A variant copying 256 contiguous bytes per row and stage (row-
// contiguous DRAM access, 3 CTAs per SM) was slower: 46% of copy bandwidth on 24576x4096
// against 62%.
#include "backend/cuda/matmul_impl.h"
#include "backend/cuda/mma_common.cuh"

namespace hibana::cuda::mm {

namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerCta = 16 * kWarps;
constexpr int kStageK = 64;             // k per pipeline stage
constexpr int kRingPerWarp = 12 << 10;  // bytes of a warp's weight ring

template <Elt E>
struct Gemv {
  static constexpr int esize = EltInfo<E>::size;
  static constexpr int VE = 16 / esize;      // weight elements per 16-byte copy
  static constexpr int KC = 4 * VE;          // k per chunk (the 4 lanes of a row)
  static constexpr int U = kStageK / KC;     // chunks per stage
  static constexpr int MMAS = VE / 4;        // k16 products per chunk
  static constexpr int kLaneCopies = 2 * U;  // 16-byte copies of a lane per stage
  static constexpr int kStageBytes = kLaneCopies * 32 * 16;
  static constexpr int D = kRingPerWarp / kStageBytes;  // ring depth in stages
  static constexpr int kXPerStage = U * VE;             // activations of a lane per stage
  static constexpr int kSmem = kWarps * kRingPerWarp;
  static_assert(D >= 3 && kXPerStage == kStageK / 4, "ring shape");
};

// The lane's sums into out (one split) or the split partials, the last CTA of a tile adding
// them in split order.
template <bool kGrouped>
__device__ __forceinline__ void finish(const Params& p, const MatPtr& mat, const float (&acc)[4],
                                       const float (&ch)[4], const float (&cm)[4],
                                       const float (&cl)[4], const int32_t* rows, int64_t rows_here,
                                       int64_t m0, int m_tiles_y, int m_tile, int my_split,
                                       int64_t rA, int64_t rB, bool okA, bool okB, int t) {
  float total[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) total[i] = mat.scale != nullptr ? acc[i] : ch[i] + (cm[i] + cl[i]);

  // Lane outputs: total[0], total[1] are row rA for tokens 2t, 2t+1; total[2], total[3] row rB.
  auto out_row = [&](int i) -> int64_t {
    const int64_t m = m0 + 2 * t + (i & 1);
    if (m >= rows_here || !(i < 2 ? okA : okB)) return -1;
    return kGrouped ? rows[m] : m;
  };
  if (p.splits == 1) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t orow = out_row(i);
      if (orow >= 0) p.out[orow * p.ldo + (i < 2 ? rA : rB)] = total[i];
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t orow = out_row(i);
    if (orow >= 0) {
      p.partial[(static_cast<int64_t>(my_split) * p.M + orow) * p.N + (i < 2 ? rA : rB)] = total[i];
    }
  }
  const int64_t tile =
      (static_cast<int64_t>(blockIdx.z) * m_tiles_y + m_tile) * gridDim.x + blockIdx.x;
  if (!last_to_finish(p.counters + tile, p.splits)) return;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t orow = out_row(i);
    if (orow < 0) continue;
    const int64_t n = i < 2 ? rA : rB;
    float v = __ldcg(p.partial + orow * p.N + n);
    for (int s = 1; s < p.splits; ++s) v = v + __ldcg(p.partial + (s * p.M + orow) * p.N + n);
    p.out[orow * p.ldo + n] = v;
  }
}

template <Elt E, bool kGrouped>
__global__ void __launch_bounds__(kWarps * 32, 4) gemv_kernel(Params p) {
  using S = Gemv<E>;
  constexpr int VE = S::VE, KC = S::KC, U = S::U, D = S::D;
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  uint4* ring = reinterpret_cast<uint4*>(smem) + warp * D * S::kLaneCopies * 32 + lane;

  // Grouped launches learn their matrix from the routing (written by the previous kernel), so
  // they wait first; plain ones start their weight copies before waiting.
  if constexpr (kGrouped) pdl_wait();
  const int m_tiles_y = gridDim.y / p.splits;
  const int m_tile = blockIdx.y % m_tiles_y;
  const int my_split = blockIdx.y / m_tiles_y;
  MatPtr mat = p.single;
  int64_t rows_here = p.M;
  const int32_t* rows = nullptr;
  if constexpr (kGrouped) {
    const int grp = group_of_slice(p);
    if (grp < 0) return;
    mat = p.mats[grp];
    rows = p.group_rows + p.group_offset[grp];
    rows_here = p.group_offset[grp + 1] - p.group_offset[grp];
  }
  const int64_t m0 = static_cast<int64_t>(m_tile) * 8;
  if (m0 >= rows_here) return;

  const int64_t rA = static_cast<int64_t>(blockIdx.x) * kRowsPerCta + warp * 16 + g, rB = rA + 8;
  const bool okA = rA < p.N, okB = rB < p.N;
  const unsigned char* wbase = static_cast<const unsigned char*>(mat.w);
  const unsigned char* wA = wbase + (okA ? rA : 0) * p.ldw * S::esize;
  const unsigned char* wB = wbase + (okB ? rB : 0) * p.ldw * S::esize;
  const int64_t k_first = static_cast<int64_t>(my_split) * p.split_len;
  const int64_t k_end = min(p.K, k_first + p.split_len);

  // Stage s covers k_first + s * kStageK; past k_end a stage copies nothing (an empty group
  // keeps the wait counts uniform).
  auto issue = [&](int64_t k0, int slot) {
    if (k0 < k_end) {
      uint4* dst = ring + slot * S::kLaneCopies * 32;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t gk = k0 + u * KC + t * VE;
        const bool in = gk < k_end;
        cp_async16_stream(dst + 2 * u * 32, wA + (in ? gk : 0) * S::esize, in && okA);
        cp_async16_stream(dst + (2 * u + 1) * 32, wB + (in ? gk : 0) * S::esize, in && okB);
      }
    }
    cp_async_commit();
  };
  int64_t k_issue = k_first;
  int slot_issue = 0;
  for (int q = 0; q < D - 1; ++q, k_issue += kStageK, ++slot_issue) issue(k_issue, slot_issue);

  if constexpr (!kGrouped) pdl_wait();  // the activations are the previous kernel's output
  // This lane's token: g (zeros for lanes past the rows).
  int64_t xrow = -1;
  if (m0 + g < rows_here) xrow = kGrouped ? rows[m0 + g] / p.x_div : m0 + g;
  const float* xp = p.x + (xrow >= 0 ? xrow * p.ldx : 0);
  auto load_x = [&](int64_t k0, float(&v)[S::kXPerStage]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t gk = k0 + u * KC + t * VE;
      const bool ok = xrow >= 0 && gk < k_end;
#pragma unroll
      for (int e = 0; e < VE; e += 4) {
        float4 f = make_float4(0.f, 0.f, 0.f, 0.f);
        if (ok) {
          if (p.vec_x) {
            f = __ldg(reinterpret_cast<const float4*>(xp + gk + e));
          } else {
            f = make_float4(__ldg(xp + gk + e), __ldg(xp + gk + e + 1), __ldg(xp + gk + e + 2),
                            __ldg(xp + gk + e + 3));
          }
        }
        v[u * VE + e] = f.x;
        v[u * VE + e + 1] = f.y;
        v[u * VE + e + 2] = f.z;
        v[u * VE + e + 3] = f.w;
      }
    }
  };

  // Three independent mma chains (the h, m and l terms of x), folded as h + (m + l) where a
  // scale block or the split ends.
  float acc[4], ch[4], cm[4], cl[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i] = ch[i] = cm[i] = cl[i] = 0.0f;
  float xnext[S::kXPerStage];
  load_x(k_first, xnext);
  int slot = 0;
  for (int64_t k0 = k_first; k0 < k_end; k0 += kStageK) {
    cp_async_wait<D - 2>();  // this stage's copies (the lane's own) have landed
    const uint4* src = ring + slot * S::kLaneCopies * 32;
    uint4 wa[U], wb[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      wa[u] = src[2 * u * 32];
      wb[u] = src[(2 * u + 1) * 32];
    }
    float xv[S::kXPerStage];
#pragma unroll
    for (int i = 0; i < S::kXPerStage; ++i) xv[i] = xnext[i];
    load_x(k0 + kStageK, xnext);
    // The slot read above is refilled only after its values are in registers and used.
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t ck = k0 + u * KC;
      if (ck >= k_end) break;  // the same for the whole warp
#pragma unroll
      for (int j = 0; j < S::MMAS; ++j) {
        uint32_t a[4];
        a_fragment<E>(wa[u], wb[u], j, a);
        // B fragment: positions (2t, 2t+1) take x elements 4j, 4j+1 of the lane's group,
        // (2t+8, 2t+9) elements 4j+2, 4j+3 — the same permutation as the weights'.
        const float* x4 = xv + u * VE + 4 * j;
        const Split3 b01 = split3(x4[0], x4[1]), b23 = split3(x4[2], x4[3]);
        mma(ch, a[0], a[1], a[2], a[3], b01.h, b23.h);
        mma(cm, a[0], a[1], a[2], a[3], b01.m, b23.m);
        mma(cl, a[0], a[1], a[2], a[3], b01.l, b23.l);
      }
      const int64_t cend = ck + KC;
      if (mat.scale != nullptr && (cend % p.block_cols == 0 || cend >= k_end)) {
        const float sa = okA ? scale_at(p, mat.scale, rA, ck) : 0.0f;
        const float sb = okB ? scale_at(p, mat.scale, rB, ck) : 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          acc[i] = fmaf(ch[i] + (cm[i] + cl[i]), i < 2 ? sa : sb, acc[i]);
          ch[i] = cm[i] = cl[i] = 0.0f;
        }
      }
    }
    issue(k_issue, slot_issue);
    k_issue += kStageK;
    slot_issue = slot_issue + 1 == D ? 0 : slot_issue + 1;
    slot = slot + 1 == D ? 0 : slot + 1;
  }
  pdl_trigger();  // every load of this CTA is done: the next kernel may start launching

  finish<kGrouped>(p, mat, acc, ch, cm, cl, rows, rows_here, m0, m_tiles_y, m_tile, my_split, rA,
                   rB, okA, okB, t);
}

template <auto kKernel, int kSmem>
void launch(const Params& p, int groups) {
  static const bool configured = [] {  // once per kernel
    HIBANA_CUDA(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>((p.N + kRowsPerCta - 1) / kRowsPerCta),
                  static_cast<unsigned>(p.splits), static_cast<unsigned>(groups));
  launch_pdl(kKernel, grid, dim3(kWarps * 32), kSmem, p);
  launched("gemv_kernel");
}

}  // namespace

void run_gemv(Params& p, Elt elt, bool grouped, int groups) {
  std::unique_ptr<Scratch> partial;
  if (p.splits > 1) partial = split_scratch(p, kRowsPerCta, 8, 8, groups);
  if (elt == Elt::bf16) {
    grouped ? launch<gemv_kernel<Elt::bf16, true>, Gemv<Elt::bf16>::kSmem>(p, groups)
            : launch<gemv_kernel<Elt::bf16, false>, Gemv<Elt::bf16>::kSmem>(p, groups);
  } else {
    grouped ? launch<gemv_kernel<Elt::fp8, true>, Gemv<Elt::fp8>::kSmem>(p, groups)
            : launch<gemv_kernel<Elt::fp8, false>, Gemv<Elt::fp8>::kSmem>(p, groups);
  }
}

}  // namespace hibana::cuda::mm
