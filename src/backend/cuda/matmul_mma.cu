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
// Loads: lane (g, t) of a warp reads 16 bytes of weight rows g and g + 8 at k = chunk + 16t/size
// (a warp instruction reads 8 rows x 64 bytes; a register stage of 4 chunks reads 256 contiguous
// bytes of each of the warp's 16 rows), straight into registers, the next stage loading while
// this one is multiplied. Within an mma the k positions of the A fragment are permuted so that
// those 16 bytes are the lane's own fragment elements; the B fragment uses the same permutation,
// which is a float4 of the lane's token.
#include <memory>

#include "backend/cuda/matmul_impl.h"
#include "backend/cuda/mma_common.cuh"

namespace hibana::cuda::mm {

namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerCta = 16 * kWarps;
constexpr int64_t kParallelRows = 64;
constexpr int kStagedK = 64;  // k per stage of the kernels that stage activations

__device__ __forceinline__ uint4 load_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ float4 load_x4(const float* p, bool vec) {
  if (vec) return __ldg(reinterpret_cast<const float4*>(p));
  return make_float4(__ldg(p), __ldg(p + 1), __ldg(p + 2), __ldg(p + 3));
}

// NT token tiles of 8 per CTA; kSerial: the warp runs every split itself (large batches);
// U: chunks per register stage (a loop blocking only: it does not change the arithmetic).
template <Elt E, int NT, bool kSerial, bool kGrouped, int U>
__global__ void __launch_bounds__(kWarps * 32, NT == 1 ? 4 : 2) mma_kernel(Params p) {
  constexpr int esize = EltInfo<E>::size;
  constexpr int VE = 16 / esize;  // weight elements per 16-byte load
  constexpr int KC = 4 * VE;      // k per chunk (the 4 lanes of a row)
  constexpr int MMAS = VE / 4;    // k16 products per chunk
  constexpr int BM = 8 * NT;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

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
  }
  const int64_t m0 = static_cast<int64_t>(m_tile) * BM;
  if (m0 >= rows_here) return;

  __shared__ int64_t x_row[BM], o_row[BM];
  fill_rows<kGrouped>(p, rows, m0, rows_here, BM, x_row, o_row);
  __syncthreads();

  const int64_t rA = static_cast<int64_t>(blockIdx.x) * kRowsPerCta + warp * 16 + g, rB = rA + 8;
  const bool okA = rA < p.N, okB = rB < p.N;
  const unsigned char* wbase = static_cast<const unsigned char*>(mat.w);
  const unsigned char* wA = wbase + (okA ? rA : 0) * p.ldw * esize;
  const unsigned char* wB = wbase + (okB ? rB : 0) * p.ldw * esize;
  const float* xr[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int64_t r = x_row[g + 8 * nt];
    xr[nt] = r >= 0 ? p.x + r * p.ldx : nullptr;
  }

  // Several token tiles (larger batches): the CTA's activations of each stage are split into
  // bf16 terms once, by all its threads, into shared memory ([token][4 k][h01 h23 m01 m23 l01
  // l23], rows padded by 8 bytes against bank conflicts), instead of by every warp.
  constexpr bool kStaged = NT > 1;
  constexpr int KI = U * KC;
  static_assert(!kStaged || KI == kStagedK, "staged kernels take 64 k per stage");
  constexpr int kPitch = kStagedK / 4 * 6 + 2;  // u32 per staged token row
  __shared__ __align__(16) uint32_t xs[kStaged ? 2 : 1][kStaged ? BM : 1][kStaged ? kPitch : 1];
  auto stage_x = [&](int slot, int64_t k0, int64_t k_end) {
    for (int i = threadIdx.x; i < BM * (KI / 4); i += blockDim.x) {
      const int r = i / (KI / 4), grp = i % (KI / 4);
      const int64_t k = k0 + 4 * grp;
      float4 xv = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (x_row[r] >= 0 && k < k_end) xv = load_x4(p.x + x_row[r] * p.ldx + k, p.vec_x);
      const Split3 b01 = split3(xv.x, xv.y), b23 = split3(xv.z, xv.w);
      uint32_t* d = &xs[slot][r][grp * 6];
      *reinterpret_cast<uint2*>(d) = make_uint2(b01.h, b23.h);
      *reinterpret_cast<uint2*>(d + 2) = make_uint2(b01.m, b23.m);
      *reinterpret_cast<uint2*>(d + 4) = make_uint2(b01.l, b23.l);
    }
  };

  // Per split: three independent mma chains (the h, m and l terms of x), folded as
  // h + (m + l) where a split or scale block ends. Weights are double-buffered in registers: the
  // next U chunks load while these are multiplied.
  float total[NT][4] = {};
  const int s_first = kSerial ? 0 : my_split, s_last = kSerial ? p.splits : my_split + 1;
  for (int s = s_first; s < s_last; ++s) {
    const int64_t k_begin = s * p.split_len, k_end = min(p.K, k_begin + p.split_len);
    float acc[NT][4], ch[NT][4], cm[NT][4], cl[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[nt][i] = ch[nt][i] = cm[nt][i] = cl[nt][i] = 0.0f;
    }
    auto load = [&](uint4(&wa)[U], uint4(&wb)[U], int64_t k0) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t gk = k0 + u * KC + t * VE;
        const bool in = gk < k_end;
        wa[u] = in && okA ? load_stream(wA + gk * esize) : make_uint4(0, 0, 0, 0);
        wb[u] = in && okB ? load_stream(wB + gk * esize) : make_uint4(0, 0, 0, 0);
      }
    };
    auto multiply = [&](const uint4(&wa)[U], const uint4(&wb)[U], int64_t k0, int slot) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t ck = k0 + u * KC;
        if (ck >= k_end) break;  // the same for the whole warp
        const int64_t lk = ck + t * VE;
        const bool lane_in = lk < k_end;
#pragma unroll
        for (int j = 0; j < MMAS; ++j) {
          uint32_t a[4];
          a_fragment<E>(wa[u], wb[u], j, a);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            Split3 b01, b23;
            if constexpr (kStaged) {
              const uint32_t* xp = &xs[slot][g + 8 * nt][((u * KC + t * VE) / 4 + j) * 6];
              const uint2 h = *reinterpret_cast<const uint2*>(xp);
              const uint2 m = *reinterpret_cast<const uint2*>(xp + 2);
              const uint2 l = *reinterpret_cast<const uint2*>(xp + 4);
              b01 = {h.x, m.x, l.x};
              b23 = {h.y, m.y, l.y};
            } else {
              float4 xv = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
              if (lane_in && xr[nt] != nullptr) xv = load_x4(xr[nt] + lk + 4 * j, p.vec_x);
              b01 = split3(xv.x, xv.y);
              b23 = split3(xv.z, xv.w);
            }
            mma(ch[nt], a[0], a[1], a[2], a[3], b01.h, b23.h);
            mma(cm[nt], a[0], a[1], a[2], a[3], b01.m, b23.m);
            mma(cl[nt], a[0], a[1], a[2], a[3], b01.l, b23.l);
          }
        }
        // Scaled formats: each scale block's sum is scaled and added as the block ends.
        const int64_t cend = ck + KC;
        if (mat.scale != nullptr && (cend % p.block_cols == 0 || cend >= k_end)) {
          const float sa = okA ? scale_at(p, mat.scale, rA, ck) : 0.0f;
          const float sb = okB ? scale_at(p, mat.scale, rB, ck) : 0.0f;
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
    // One stage: the next one's weights (and staged activations) load while this one is
    // multiplied. Every warp of the CTA runs the same stages, so the barriers are uniform.
    auto step = [&](uint4(&wa)[U], uint4(&wb)[U], uint4(&na)[U], uint4(&nb)[U], int64_t k0,
                    int slot) {
      const bool more = k0 + KI < k_end;
      if (more) load(na, nb, k0 + KI);
      if constexpr (kStaged) {
        __syncthreads();  // this stage's activations are in; the other slot is free
        if (more) stage_x(slot ^ 1, k0 + KI, k_end);
      }
      multiply(wa, wb, k0, slot);
    };
    uint4 wa0[U], wb0[U], wa1[U], wb1[U];
    if constexpr (kStaged) {
      __syncthreads();  // the previous split's last stage has been read
      stage_x(0, k_begin, k_end);
    }
    load(wa0, wb0, k_begin);
    for (int64_t k0 = k_begin; k0 < k_end;) {
      step(wa0, wb0, wa1, wb1, k0, 0);
      k0 += KI;
      if (k0 >= k_end) break;
      step(wa1, wb1, wa0, wb0, k0, 1);
      k0 += KI;
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float v = mat.scale != nullptr ? acc[nt][i] : ch[nt][i] + (cm[nt][i] + cl[nt][i]);
        total[nt][i] = s == s_first ? v : total[nt][i] + v;
      }
    }
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
    float v = __ldcg(p.partial + orow * p.N + n);
    for (int s = 1; s < p.splits; ++s) v = v + __ldcg(p.partial + (s * p.M + orow) * p.N + n);
    p.out[orow * p.ldo + n] = v;
  });
}

template <Elt E, int NT, bool kSerial, int U = NT == 1 ? 4 : kStagedK / (64 / EltInfo<E>::size)>
void launch(const Params& p, bool grouped, int64_t m_tiles, int groups) {
  dim3 grid(static_cast<unsigned>((p.N + kRowsPerCta - 1) / kRowsPerCta),
            static_cast<unsigned>(m_tiles * (kSerial ? 1 : p.splits)),
            static_cast<unsigned>(groups));
  if (grouped) {
    mma_kernel<E, NT, kSerial, true, U><<<grid, kWarps * 32, 0, stream()>>>(p);
  } else {
    mma_kernel<E, NT, kSerial, false, U><<<grid, kWarps * 32, 0, stream()>>>(p);
  }
  launched("mma_kernel");
}

// Batches up to 8 take one token tile per CTA, larger ones four. Splits run in parallel CTAs up
// to kParallelRows rows (their partial sums stay a few tens of MiB), serially in each warp for
// longer prompts: the same arithmetic either way.
template <Elt E>
void launch_elt(const Params& p, bool parallel, bool grouped, int64_t max_rows, int groups) {
  if (max_rows <= 8) return launch<E, 1, false>(p, grouped, 1, groups);
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

void run_mma(const Params& in, Elt elt, bool grouped, int64_t max_rows, int groups) {
  Params p = in;
  if (max_rows > kParallelRows && tiled_supports(p, grouped))
    return run_tiled(p, elt, grouped, max_rows, groups);
  const bool parallel = p.splits > 1 && max_rows <= kParallelRows;
  std::unique_ptr<Scratch> partial;
  if (parallel) partial = split_scratch(p, kRowsPerCta, max_rows <= 8 ? 8 : 32, max_rows, groups);
  if (elt == Elt::bf16) {
    launch_elt<Elt::bf16>(p, parallel, grouped, max_rows, groups);
  } else {
    launch_elt<Elt::fp8>(p, parallel, grouped, max_rows, groups);
  }
}

}  // namespace hibana::cuda::mm
