// Tensor-core matmul for bf16 and fp8 weights: out = x · wᵀ with mma.sync m16n8k16 (bf16 in,
// f32 accumulate), the weights as the A operand (16 rows per warp) and the tokens as the B
// columns (8 per tile).
//
// Batch invariance: an mma's output column depends only on that column's inputs, and the
// sequence of mmas that builds an output element depends only on the weight's shape — K is cut
// into the same shape-only splits as the SIMT kernel uses, each split is walked chunk by chunk
// with k ascending, and the split sums are added in split order (by the last CTA of a tile, or
// in the same warp for large batches). So a token's outputs are bit-identical alone and in any
// batch, and the same in prefill and decode.
//
// Accuracy: activations are f32; each is split into three bf16 terms (x = h + m + l, exact to
// f32 rounding) and every weight chunk is multiplied by all three, so products are exact and
// only the f32 accumulation rounds — about as close to an f32 SIMT dot product as makes no
// difference, at three times the tensor work (decode is bound by reading the weights, prefill
// by the mmas).
//
// Loads: lane (g, t) of a warp copies 16 bytes of weight rows g and g + 8 at k = chunk + 16t/size
// (a warp instruction covers 8 rows x 64 bytes) with cp.async into its own slots of a ring in
// shared memory, several 64-k stages ahead of the one it multiplies: each lane reads back only
// what it copied, so the warps stream independently and the bytes in flight do not cost
// registers. Within an mma the k positions of the A fragment are permuted so that those 16
// bytes are the lane's own fragment elements. The CTA's activations travel with the weights,
// through a shared ring, and are split into their bf16 terms once per stage, one stage before
// they are used; the B fragment uses the same permutation.
#include <atomic>
#include <memory>

#include "backend/cuda/matmul_impl.h"
#include "backend/cuda/mma_common.cuh"

namespace hibana::cuda::mm {

namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerCta = 16 * kWarps;
constexpr int64_t kParallelRows = 64;
constexpr int kStageK = 64;  // k per pipeline stage

// Sizes of the kernel for NT token tiles of 8 per CTA (NT = 4: up to 8 tokens take the decode
// kernel of matmul_gemv.cu). The weight ring holds 6 KiB per warp.
template <Elt E, int NT>
struct Small {
  static constexpr int esize = EltInfo<E>::size;
  static constexpr int VE = 16 / esize;                     // weight elements per 16-byte copy
  static constexpr int KC = 4 * VE;                         // k per chunk (the 4 lanes of a row)
  static constexpr int U = kStageK / KC;                    // chunks per stage
  static constexpr int MMAS = VE / 4;                       // k16 products per chunk
  static constexpr int BM = 8 * NT;                         // token rows
  static constexpr int kLaneCopies = 2 * U;                 // 16-byte copies of a lane per stage
  static constexpr int D = 6144 / (32 * 16 * kLaneCopies);  // ring depth
  static constexpr int kRingBytes = kWarps * D * kLaneCopies * 32 * 16;
  static constexpr int kXRawBytes = D * BM * kStageK * 4;  // the activations' ring
  static constexpr int kPitch = kStageK / 4 * 6 + 2;       // u32 per token row of split terms
  static constexpr int kSmem = kRingBytes + kXRawBytes + 2 * BM * kPitch * 4;
  static_assert(D >= 3, "ring too shallow");
};

// kSerial: the CTA runs every split itself (large batches).
template <Elt E, int NT, bool kSerial, bool kGrouped>
__global__ void __launch_bounds__(kWarps * 32, 2) mma_kernel(Params p) {
  pdl_start();
  using S = Small<E, NT>;
  constexpr int esize = S::esize, VE = S::VE, KC = S::KC, U = S::U, BM = S::BM, D = S::D;
  // 128-byte aligned for its cp.async copies (gemv_kernel.cuh says why).
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  uint4* ring = reinterpret_cast<uint4*>(smem) + warp * D * S::kLaneCopies * 32 + lane;
  float* xraw = reinterpret_cast<float*>(smem + S::kRingBytes);  // [D][BM][kStageK]
  uint32_t* xs = reinterpret_cast<uint32_t*>(smem + S::kRingBytes + S::kXRawBytes);

  const int m_tiles_y = kSerial ? gridDim.y : gridDim.y / p.splits;
  const int m_tile = kSerial ? blockIdx.y : blockIdx.y % m_tiles_y;
  const int my_split = kSerial ? 0 : blockIdx.y / m_tiles_y;
  MatPtr mat = p.single;
  int64_t rows_here = p.M;
  const int32_t* rows = nullptr;
  if constexpr (kGrouped) {
    const int grp = group_of_slice(p);
    if (grp < 0) return;
    mat = p.mats[grp];
    rows = p.group_rows + p.group_offset[grp];
    rows_here = p.group_offset[grp + 1] - p.group_offset[grp];
    if (not_my_group(p, rows_here)) return;
  }
  const int64_t m0 = static_cast<int64_t>(m_tile) * BM;
  if (m0 >= rows_here) return;

  __shared__ int64_t x_at[BM], o_row[BM];  // (fill_rows)
  fill_rows<kGrouped>(p, rows, m0, rows_here, BM, p.ldx, x_at, o_row);
  __syncthreads();

  const int64_t rA = static_cast<int64_t>(blockIdx.x) * kRowsPerCta + warp * 16 + g, rB = rA + 8;
  const bool okA = rA < p.N, okB = rB < p.N;
  const unsigned char* wbase = static_cast<const unsigned char*>(mat.w);
  const unsigned char* wA = wbase + (okA ? rA : 0) * p.ldw * esize;
  const unsigned char* wB = wbase + (okB ? rB : 0) * p.ldw * esize;

  // The CTA's stages: its splits (all of them when serial), each cut into kStageK pieces. A
  // Stage is advanced one at a time (no divisions in the loop); past the CTA's last split it
  // stays empty (k0 == k_end).
  const int64_t k_first = static_cast<int64_t>(kSerial ? 0 : my_split) * p.split_len;
  const int64_t k_last = kSerial ? p.K : min(p.K, k_first + p.split_len);
  struct Stage {
    int64_t k0, k_end;  // first k of the stage, end of its split
    int slot;           // ring slot
  };
  auto next = [&](Stage& st) {
    st.k0 += kStageK;
    if (st.k0 >= st.k_end) {
      st.k0 = st.k_end;
      st.k_end = min(k_last, st.k0 + p.split_len);
    }
    st.slot = st.slot + 1 == D ? 0 : st.slot + 1;
  };
  // A stage's weights into the lane's ring slot, and the CTA's activations of the stage into
  // the shared ring slot (zeros past the split or the rows).
  auto issue = [&](const Stage& st) {
    if (st.k0 < st.k_end) {
      uint4* slot = ring + st.slot * S::kLaneCopies * 32;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t gk = st.k0 + u * KC + t * VE;
        const bool in = gk < st.k_end;
        cp_async16_stream(slot + 2 * u * 32, wA + (in ? gk : 0) * esize, in && okA);
        cp_async16_stream(slot + (2 * u + 1) * 32, wB + (in ? gk : 0) * esize, in && okB);
      }
      float* xr = xraw + st.slot * BM * kStageK;
      for (int i = threadIdx.x; i < BM * kStageK / 4; i += kWarps * 32) {
        const int r = i / (kStageK / 4), c = i % (kStageK / 4);
        const int64_t k = st.k0 + 4 * c;
        const bool ok = x_at[r] >= 0 && k < st.k_end;
        const float* src = p.x + (ok ? x_at[r] + k : 0);
        if (p.vec_x) {
          cp_async16(xr + r * kStageK + 4 * c, src, ok);
        } else {
          for (int e = 0; e < 4; ++e)
            cp_async4(xr + r * kStageK + 4 * c + e, src + (ok ? e : 0), ok);
        }
      }
    }
    cp_async_commit();
  };
  // A landed stage's activations as three bf16 terms ([token][4 k][h01 h23 m01 m23 l01 l23],
  // rows padded against bank conflicts).
  auto split_x = [&](int raw_slot, int term_slot) {
    const float* xr = xraw + raw_slot * BM * kStageK;
    for (int i = threadIdx.x; i < BM * kStageK / 4; i += kWarps * 32) {
      const int r = i / (kStageK / 4), c = i % (kStageK / 4);
      const float4 v = *reinterpret_cast<const float4*>(xr + r * kStageK + 4 * c);
      const Split3 b01 = split3(v.x, v.y), b23 = split3(v.z, v.w);
      uint32_t* d = xs + (term_slot * BM + r) * S::kPitch + c * 6;
      *reinterpret_cast<uint2*>(d) = make_uint2(b01.h, b23.h);
      *reinterpret_cast<uint2*>(d + 2) = make_uint2(b01.m, b23.m);
      *reinterpret_cast<uint2*>(d + 4) = make_uint2(b01.l, b23.l);
    }
  };

  // Per split: three independent mma chains (the h, m and l terms of x), folded as
  // h + (m + l) where a split or scale block ends; splits added in order.
  float total[NT][4], acc[NT][4], ch[NT][4], cm[NT][4], cl[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      total[nt][i] = acc[nt][i] = ch[nt][i] = cm[nt][i] = cl[nt][i] = 0.0f;
  }
  // Scaled formats: the block scales of the lane's rows A and B from the CTA's first k.
  BlockScales<2> scales;
  if (mat.scale != nullptr) {
    const int64_t scale_rows[2] = {rA, rB};
    scales.start(p, mat.scale, scale_rows, p.N, k_first);
  }
  auto multiply = [&](const Stage& st, int x_slot) {
    const int64_t k_end = st.k_end;
    const uint4* slot = ring + st.slot * S::kLaneCopies * 32;
    const uint32_t* x = xs + x_slot * BM * S::kPitch;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t ck = st.k0 + u * KC;
      if (ck >= k_end) break;  // the same for the whole warp
      const uint4 wa = slot[2 * u * 32], wb = slot[(2 * u + 1) * 32];
#pragma unroll
      for (int j = 0; j < S::MMAS; ++j) {
        uint32_t a[4];
        a_fragment<E>(wa, wb, j, a);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint32_t* xp = x + (g + 8 * nt) * S::kPitch + ((u * KC + t * VE) / 4 + j) * 6;
          const uint2 h = *reinterpret_cast<const uint2*>(xp);
          const uint2 m = *reinterpret_cast<const uint2*>(xp + 2);
          const uint2 l = *reinterpret_cast<const uint2*>(xp + 4);
          mma(ch[nt], a[0], a[1], a[2], a[3], h.x, h.y);
          mma(cm[nt], a[0], a[1], a[2], a[3], m.x, m.y);
          mma(cl[nt], a[0], a[1], a[2], a[3], l.x, l.y);
        }
      }
      // Scaled formats: each scale block's sum is scaled and added as the block ends.
      const int64_t cend = ck + KC;
      if (mat.scale != nullptr && (cend == scales.end || cend >= k_end)) {
        const float sa = scales.s[0], sb = scales.s[1];
        if (cend == scales.end) scales.next(p, mat.scale);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            acc[nt][i] = fmaf(ch[nt][i] + (cm[nt][i] + cl[nt][i]), i < 2 ? sa : sb, acc[nt][i]);
            ch[nt][i] = cm[nt][i] = cl[nt][i] = 0.0f;
          }
        }
      }
    }
  };
  auto end_split = [&](bool first) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float v = mat.scale != nullptr ? acc[nt][i] : ch[nt][i] + (cm[nt][i] + cl[nt][i]);
        total[nt][i] = first ? v : total[nt][i] + v;
        acc[nt][i] = ch[nt][i] = cm[nt][i] = cl[nt][i] = 0.0f;
      }
    }
  };

  // The stage multiplied and the one being copied (D - 1 ahead). A stage's activations are
  // split one iteration before it is multiplied, so two stages must have landed at each barrier.
  Stage mul{k_first, min(k_last, k_first + p.split_len), 0};
  Stage iss = mul;
  for (int q = 0; q < D - 1; ++q, next(iss)) issue(iss);
  cp_async_wait<D - 3>();  // the first two stages have landed
  __syncthreads();
  split_x(0, 0);
  bool first = true;
  for (int x_slot = 0; mul.k0 < mul.k_end; x_slot ^= 1) {
    __syncthreads();  // this stage's terms and the next one's activations are visible
    issue(iss);       // into the slots emptied two iterations ago
    next(iss);
    multiply(mul, x_slot);
    split_x(mul.slot + 1 == D ? 0 : mul.slot + 1, x_slot ^ 1);
    if (mul.k0 + kStageK >= mul.k_end) {  // the stage ends its split
      end_split(first);
      first = false;
    }
    next(mul);
    cp_async_wait<D - 3>();  // the stage after the next one has landed
  }

  // Lane outputs: c[0], c[1] are row rA for tokens 2t, 2t+1 of each tile; c[2], c[3] row rB.
  auto for_outputs = [&](auto&& f) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t orow = o_row[8 * nt + 2 * t + (i & 1)];
        const bool ok = i < 2 ? okA : okB;
        if (orow >= 0 && ok) f(orow, i < 2 ? rA : rB, total[nt][i]);
      }
    }
  };
  if (kSerial || p.splits == 1) {
    for_outputs([&](int64_t orow, int64_t n, float v) { p.out[orow * p.ldo + n] = v; });
    return;
  }
  for_outputs([&](int64_t orow, int64_t n, float v) {
    p.partial[(static_cast<int64_t>(my_split) * p.M + orow) * p.N + n] = v;
  });
  const int64_t tile =
      (static_cast<int64_t>(blockIdx.z) * m_tiles_y + m_tile) * gridDim.x + blockIdx.x;
  if (!last_to_finish(p.counters + tile, p.splits)) return;
  for_outputs([&](int64_t orow, int64_t n, float) {
    const int64_t elem[1] = {orow * p.N + n};
    float v[1];
    split_sums(p.partial, elem, p.M * p.N, p.splits, v);
    p.out[orow * p.ldo + n] = v[0];
  });
}

template <Elt E, int NT, bool kSerial, bool kGrouped>
void launch_kernel(const Params& p, dim3 grid) {
  constexpr int smem = Small<E, NT>::kSmem;
  auto kernel = mma_kernel<E, NT, kSerial, kGrouped>;
  static const bool configured = [kernel] {  // once per instantiation
    HIBANA_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  }();
  (void)configured;
  launch_pdl(kernel, grid, kWarps * 32, smem, p);
  launched("mma_kernel");
}

template <Elt E, int NT, bool kSerial>
void launch(const Params& p, bool grouped, int64_t m_tiles, int groups) {
  dim3 grid(static_cast<unsigned>((p.N + kRowsPerCta - 1) / kRowsPerCta),
            static_cast<unsigned>(m_tiles * (kSerial ? 1 : p.splits)),
            static_cast<unsigned>(groups));
  if (grouped) return launch_kernel<E, NT, kSerial, true>(p, grid);
  launch_kernel<E, NT, kSerial, false>(p, grid);
}

// Four token tiles per CTA (batches up to 8 go to matmul_gemv.cu). Splits run in parallel CTAs
// up to kParallelRows rows (their partial sums stay a few tens of MiB), serially in each CTA
// for longer prompts: the same arithmetic either way.
template <Elt E>
void launch_elt(const Params& p, bool parallel, bool grouped, int64_t max_rows, int groups) {
  const int64_t m_tiles = (max_rows + 31) / 32;
  if (parallel) return launch<E, 4, false>(p, grouped, m_tiles, groups);
  launch<E, 4, true>(p, grouped, m_tiles, groups);
}

}  // namespace

bool mma_supports(const Params& p, Elt elt) {
  if (elt != Elt::bf16 && elt != Elt::fp8) return false;
  if (!p.vec_w) return false;  // (every GPU the backend accepts, sm_80+, has these mmas)
  const int64_t chunk = elt == Elt::bf16 ? 32 : 64;  // KC of the kernel
  return p.scale_kind == 0 || p.block_cols % chunk == 0;
}

namespace {
std::atomic<int64_t> g_small_passes{0};  // cuda_grouped_small_passes()
}  // namespace

void run_mma(const Params& in, Elt elt, bool grouped, int64_t max_rows, int groups) {
  Params p = in;
  if (max_rows <= 8) return run_gemv(p, elt, grouped, max_rows, groups);
  // Most groups of a decode batch (an expert's tokens) are far smaller than max_rows: those
  // of up to 8 rows take the decode kernel, the launch below skips them. Same bits either way
  // (every kernel builds an output element from the same mma sequence). Its split partials
  // hold a row for every pair of the launch, so past HIBANA_CUDA_GEMV_PARTIALS_KB (256 MiB: a
  // long prefill pass, e.g. the 80B's 8k-token pass, 1408 MiB with 2 splits, which an 80 GB
  // H100 holding its weights cannot give) the launch below takes those groups too.
  const int64_t partials = p.splits > 1 ? p.splits * p.M * p.N * int64_t{sizeof(float)} : 0;
  if (grouped && partials <= (knob("HIBANA_CUDA_GEMV_PARTIALS_KB", 256 << 10) << 10)) {
    g_small_passes.fetch_add(1, std::memory_order_relaxed);
    Params small = p;
    small.rows_max = 8;
    run_gemv(small, elt, true, 8, groups);
    p.rows_min = 9;
  }
  if (max_rows > kParallelRows && tiled_supports(p, elt, grouped))
    return run_tiled(p, elt, grouped, max_rows, groups);
  const bool parallel = p.splits > 1 && max_rows <= kParallelRows;
  std::unique_ptr<Scratch> partial;
  if (parallel) partial = split_scratch(p, kRowsPerCta, 32, max_rows, groups);
  if (elt == Elt::bf16) {
    launch_elt<Elt::bf16>(p, parallel, grouped, max_rows, groups);
  } else {
    launch_elt<Elt::fp8>(p, parallel, grouped, max_rows, groups);
  }
}

}  // namespace hibana::cuda::mm

namespace hibana {
int64_t cuda_grouped_small_passes() {
  return cuda::mm::g_small_passes.load(std::memory_order_relaxed);
}
}  // namespace hibana
