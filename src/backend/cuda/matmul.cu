// out = x · wᵀ on CUDA with SIMT f32 arithmetic: the kernel for f32 and f16 weights and for
// bf16 / fp8 rows that are not 16-byte aligned (matmul_mma.cu takes the other bf16 and fp8
// weights on tensor cores; which family runs depends on the weight alone).
//
// Every output element is computed in one canonical order, whatever the batch: K is cut into
// splits whose length depends only on the weight's shape; within a split, w[n,k] * x[m,k] is
// accumulated with fmaf for k ascending from zero; the split sums are then added in split
// order (total = p0, total += p1, ...). Kernels differ only in how many rows (TM) a thread
// carries and whether splits run in parallel CTAs (the last CTA of a tile adds the partials)
// or one after another in the same CTA; all of them perform exactly these operations, so a
// sequence's logits are bit-identical alone and in any batch.
//
// Tiles: 128 threads; each thread owns one weight row n and TM activation rows. Weight rows
// stream through shared memory 128 bytes at a time (cp.async, 2 to 4 stages), in rows padded
// to 144 bytes so that each quarter-warp's 16-byte reads of 8 consecutive rows hit distinct
// banks. Every configuration fits the 99 KiB of shared memory of sm_86/89/121 parts.
#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "backend/cuda/matmul_impl.h"
#include "backend/cuda/ops.h"
#include "core/device_memory.h"

namespace hibana::cuda {
namespace mm {
namespace {

constexpr int kThreads = 128;
constexpr int kRowBytes = 128;  // weight bytes per row per stage
constexpr int kChunks = kRowBytes / 16;
constexpr int kRowPitch = 144;  // padded pitch of a weight row in shared memory

// Pipeline depth: deep for the bandwidth-bound small batches, shallower where the activation
// tile is large.
constexpr int stages_for(int tm, bool serial) {
  return serial ? 2 : tm <= 4 ? 4 : tm <= 16 ? 3 : 2;
}
constexpr int64_t kSplitQuantum = 128;  // split lengths are multiples of this (fp8 block size)

// TM rows per thread, G row groups per CTA (so BN = 128 / G weight rows and BM = TM * G
// activation rows), kSerial: all splits in this CTA.
template <Elt E, int TM, int G, bool kSerial, bool kGrouped>
__global__ void __launch_bounds__(kThreads) matmul_kernel(Params p) {
  pdl_start();
  constexpr int esize = EltInfo<E>::size;
  constexpr int BK = kRowBytes / esize;  // elements per stage
  constexpr int VE = 16 / esize;         // elements per 16-byte chunk
  constexpr int BN = kThreads / G, BM = TM * G;
  constexpr int XP = BK + 4;  // padded pitch of an activation row, floats
  constexpr int kStages = stages_for(TM, kSerial);
  // 128-byte aligned for its cp.async copies (gemv_kernel.cuh says why).
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* ws = smem;  // [kStages][BN][kRowPitch]
  float* xs = reinterpret_cast<float*>(smem + kStages * BN * kRowPitch);  // [kStages][BM][XP]

  const int tid = threadIdx.x;
  const int n_local = tid % BN, g = tid / BN;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int64_t n = n0 + n_local;

  // Which rows this CTA serves.
  const int m_tiles_y = kSerial ? gridDim.y : gridDim.y / p.splits;
  const int m_tile = kSerial ? blockIdx.y : blockIdx.y % m_tiles_y;
  const int split0 = kSerial ? 0 : blockIdx.y / m_tiles_y;
  MatPtr mat = p.single;
  int64_t rows_here = p.M, row_base = 0;
  const int32_t* rows = nullptr;
  if constexpr (kGrouped) {
    const int grp = group_of_slice(p);
    if (grp < 0) return;
    mat = p.mats[grp];
    row_base = p.group_offset[grp];
    rows_here = p.group_offset[grp + 1] - row_base;
    rows = p.group_rows + row_base;
  }
  const int64_t m0 = static_cast<int64_t>(m_tile) * BM;
  if (m0 >= rows_here) return;

  // Where the BM rows' activations start, and their out rows (-1 past the end).
  __shared__ int64_t x_at[BM], o_row[BM];
  fill_rows<kGrouped>(p, rows, m0, rows_here, BM, p.ldx, x_at, o_row);
  __syncthreads();

  const int64_t k_begin = kSerial ? 0 : split0 * p.split_len;
  const int64_t k_end = kSerial ? p.K : min(p.K, k_begin + p.split_len);
  const int ntiles = static_cast<int>((k_end - k_begin + BK - 1) / BK);
  const unsigned char* wbase = static_cast<const unsigned char*>(mat.w);

  auto load_tile = [&](int t, int slot) {
    const int64_t k0 = k_begin + static_cast<int64_t>(t) * BK;
    unsigned char* wdst = ws + slot * BN * kRowPitch;
    for (int c = tid; c < BN * kChunks; c += kThreads) {
      const int r = c / kChunks, part = c % kChunks;
      const int64_t gn = n0 + r, gk = k0 + part * VE;
      unsigned char* d = wdst + r * kRowPitch + part * 16;
      if (p.vec_w) {
        const bool ok = gn < p.N && gk < k_end;
        const void* src = ok ? wbase + (gn * p.ldw + gk) * esize : wbase;
        cp_async16(d, src, ok);
      } else {
        for (int e = 0; e < VE; ++e) {
          const bool ok = gn < p.N && gk + e < k_end;
          for (int b = 0; b < esize; ++b) {
            d[e * esize + b] = ok ? wbase[(gn * p.ldw + gk + e) * esize + b] : 0;
          }
        }
      }
    }
    float* xdst = xs + slot * BM * XP;
    if (p.vec_x) {
      for (int c = tid; c < BM * (BK / 4); c += kThreads) {
        const int r = c / (BK / 4), part = c % (BK / 4);
        const int64_t gk = k0 + part * 4;
        const bool ok = x_at[r] >= 0 && gk < k_end;
        const float* src = ok ? p.x + x_at[r] + gk : p.x;
        cp_async16(xdst + r * XP + part * 4, src, ok);
      }
    } else {
      for (int c = tid; c < BM * BK; c += kThreads) {
        const int r = c / BK, kk = c % BK;
        const int64_t gk = k0 + kk;
        const bool ok = x_at[r] >= 0 && gk < k_end;
        cp_async4(xdst + r * XP + kk, ok ? p.x + x_at[r] + gk : p.x, ok);
      }
    }
  };

  float acc[TM], total[TM];
#pragma unroll
  for (int i = 0; i < TM; ++i) acc[i] = total[i] = 0.0f;
  const int64_t split_tiles = p.split_len / BK;  // tiles per split (serial bookkeeping)

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < ntiles) load_tile(s, s);
    cp_async_commit();
  }
  for (int t = 0; t < ntiles; ++t) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (t + kStages - 1 < ntiles) load_tile(t + kStages - 1, (t + kStages - 1) % kStages);
    cp_async_commit();

    const int slot = t % kStages;
    const unsigned char* wrow = ws + slot * BN * kRowPitch + n_local * kRowPitch;
    const float* xt = xs + slot * BM * XP + g * TM * XP;
    const int64_t k0 = k_begin + static_cast<int64_t>(t) * BK;
#pragma unroll
    for (int part = 0; part < kChunks; ++part) {
      float wf[VE];
      decode16<E>(*reinterpret_cast<const uint4*>(wrow + part * 16), wf);
      // Past the row's end the weights are zero-filled and have no scale to read.
      if (mat.scale != nullptr && n < p.N && k0 + part * VE < p.K) {
        const float sc = scale_at(p, mat.scale, n, k0 + part * VE);
#pragma unroll
        for (int e = 0; e < VE; ++e) wf[e] *= sc;
      }
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const float* xr = xt + i * XP + part * VE;
#pragma unroll
        for (int e = 0; e < VE; e += 4) {
          const float4 xv = *reinterpret_cast<const float4*>(xr + e);
          acc[i] = fmaf(wf[e], xv.x, acc[i]);
          acc[i] = fmaf(wf[e + 1], xv.y, acc[i]);
          acc[i] = fmaf(wf[e + 2], xv.z, acc[i]);
          acc[i] = fmaf(wf[e + 3], xv.w, acc[i]);
        }
      }
    }
    if constexpr (kSerial) {
      if ((t + 1) % split_tiles == 0 || t + 1 == ntiles) {
        const bool first = t + 1 <= split_tiles;
#pragma unroll
        for (int i = 0; i < TM; ++i) {
          total[i] = first ? acc[i] : total[i] + acc[i];
          acc[i] = 0.0f;
        }
      }
    }
  }
  cp_async_wait<0>();

  if (kSerial || p.splits == 1) {
    if (n >= p.N) return;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int64_t orow = o_row[g * TM + i];
      if (orow >= 0) p.out[orow * p.ldo + n] = kSerial ? total[i] : acc[i];
    }
    return;
  }
  // Split-parallel: publish this split's partials; the CTA that finishes a tile last adds the
  // tile's splits in split order (total = p0, total += p1, ...) and resets the tile's counter.
  if (n < p.N) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int64_t orow = o_row[g * TM + i];
      if (orow >= 0) p.partial[(static_cast<int64_t>(split0) * p.M + orow) * p.N + n] = acc[i];
    }
  }
  const int64_t tile =
      (static_cast<int64_t>(blockIdx.z) * m_tiles_y + m_tile) * gridDim.x + blockIdx.x;
  if (!last_to_finish(p.counters + tile, p.splits)) return;
  if (n >= p.N) return;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int64_t orow = o_row[g * TM + i];
    if (orow < 0) continue;
    const int64_t elem[1] = {orow * p.N + n};
    float t[1];
    split_sums(p.partial, elem, p.M * p.N, p.splits, t);
    p.out[orow * p.ldo + n] = t[0];
  }
}

}  // namespace

// Kept for the life of the program: each user leaves its counters at zero again.
int* finish_counters(size_t count) {
  static std::mutex m;
  static Buffer buf;
  std::lock_guard<std::mutex> lock(m);
  if (buf.size() < count * sizeof(int)) {
    const size_t want = std::max<size_t>(count, size_t(1) << 16) * sizeof(int);
    HIBANA_CUDA(cudaStreamSynchronize(stream()));  // the old buffer may still be in use
    buf = Buffer(want, Device::cuda);
    HIBANA_CUDA(cudaMemsetAsync(buf.data(), 0, want, stream()));
  }
  return static_cast<int*>(buf.data());
}

std::unique_ptr<Scratch> split_scratch(Params& p, int64_t bn, int64_t bm, int64_t max_rows,
                                       int groups) {
  auto partial =
      std::make_unique<Scratch>(static_cast<size_t>(p.splits * p.M * p.N) * sizeof(float));
  p.partial = partial->as<float>();
  p.counters = finish_counters(
      static_cast<size_t>(((p.N + bn - 1) / bn) * ((max_rows + bm - 1) / bm) * groups));
  return partial;
}

namespace {

// The split length of a [N, K] weight: enough splits that a decode step fills the GPU (264
// tiles of 128 rows, HIBANA_CUDA_SPLIT_TILES; fp8 528), never shorter than 512 elements
// (HIBANA_CUDA_SPLIT_MIN), a multiple of kSplitQuantum. Depends on the shape, the element type
// and whether the weight is an expert's only, never on the batch: every kernel splits a
// product alike. 528 tiles gave the 80B (fp8) 1.010 / 1.019 at batch 1 / 8 and the 8B (bf16)
// 0.982 / 0.952 (docs/benchmarks.md, twenty-sixth slice); for fp8 only, the 80B 1.005 / 1.018
// (twenty-eighth slice).
// Grouped (MoE expert) launches read their own tile target, HIBANA_CUDA_GROUPED_SPLIT_TILES
// (8, fp8 32): a token's k experts already give a decode step k times the tiles of one matrix.
// With 264, the 80B's stacked expert gate/up (1024 x 2048 fp8) took 4 splits of 512 — 704 CTAs
// of 32 KiB at batch 1, a second wave of CTAs that spend their life filling the ring; 16 gave
// 2 splits (80B decode +2.0% at batch 1, +6.4% at batch 8: docs/benchmarks.md, thirteenth
// slice), 8 one, as for the down projection (a further +1.1% and +3.5%, fourteenth slice; 4
// and 6 no better, 12 and 32 worse; with 16's 2 splits in one CTA, 1.004 / 1.000 against 8's
// one: twenty-seventh slice). With one token's splits in one CTA, fp8 experts take 32 (the
// 80B's gate/up in 4 splits: 1.019-1.024 at batch 1, 1.004-1.006 at 8 against one; 8 splits
// of 256, 0.94 / 0.84 of 4; a Qwen3-30B-A3B's gate/up in 2, 0.993 / 0.996 against one, within
// the runs' spread: twenty-eighth slice).
// The knobs are read once: a value other than the default changes every product's splits,
// hence its bits; a tile target set applies to both element types.
int64_t split_length(int64_t N, int64_t K, bool grouped, Elt elt) {
  static const int64_t plain_tiles = knob("HIBANA_CUDA_SPLIT_TILES", 0);
  static const int64_t grouped_tiles = knob("HIBANA_CUDA_GROUPED_SPLIT_TILES", 0);
  static const int64_t shortest = knob("HIBANA_CUDA_SPLIT_MIN", 512);
  const bool fp8 = elt == Elt::fp8;
  const int64_t tiles = grouped ? (grouped_tiles ? grouped_tiles : fp8 ? 32 : 8)
                                : (plain_tiles ? plain_tiles : fp8 ? 528 : 264);
  const int64_t n_tiles = (N + 127) / 128;
  const int64_t want = std::max<int64_t>(1, tiles / n_tiles);
  const int64_t most = std::max<int64_t>(1, K / shortest);
  const int64_t splits = std::clamp<int64_t>(want, 1, most);
  const int64_t len = (K + splits - 1) / splits;
  return (len + kSplitQuantum - 1) / kSplitQuantum * kSplitQuantum;
}

struct Config {
  int tm, g;
  bool serial;
};
Config pick_config(int64_t rows) {
  if (rows <= 1) return {1, 1, false};
  if (rows <= 4) return {4, 1, false};
  if (rows <= 16) return {16, 1, false};
  if (rows <= 32) return {32, 1, false};
  return {16, 4, true};
}

template <Elt E, int TM, int G, bool kSerial, bool kGrouped>
void launch_config(const Params& p, int64_t max_rows, int groups) {
  constexpr int esize = EltInfo<E>::size, BK = kRowBytes / esize;
  constexpr int BN = kThreads / G, BM = TM * G;
  const size_t smem = stages_for(TM, kSerial) * (BN * kRowPitch + BM * (BK + 4) * sizeof(float));
  auto kernel = matmul_kernel<E, TM, G, kSerial, kGrouped>;
  static std::once_flag once;
  std::call_once(once, [&] {
    HIBANA_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  });
  const int64_t m_tiles = (max_rows + BM - 1) / BM;
  dim3 grid(static_cast<unsigned>((p.N + BN - 1) / BN),
            static_cast<unsigned>(m_tiles * (kSerial ? 1 : p.splits)),
            static_cast<unsigned>(groups));
  launch_pdl(kernel, grid, kThreads, smem, p);
  launched("matmul_kernel");
}

template <Elt E, bool kGrouped>
void launch_elt(const Params& p, int64_t max_rows, int groups) {
  const Config c = pick_config(max_rows);
  if (c.serial) return launch_config<E, 16, 4, true, kGrouped>(p, max_rows, groups);
  switch (c.tm) {
    case 1:
      return launch_config<E, 1, 1, false, kGrouped>(p, max_rows, groups);
    case 4:
      return launch_config<E, 4, 1, false, kGrouped>(p, max_rows, groups);
    case 16:
      return launch_config<E, 16, 1, false, kGrouped>(p, max_rows, groups);
    default:
      return launch_config<E, 32, 1, false, kGrouped>(p, max_rows, groups);
  }
}

}  // namespace

// Adds the split reduction when the launch runs splits in parallel.
void run(Params p, Elt elt, bool grouped, int64_t max_rows, int groups) {
  if (p.M == 0 || p.N == 0) return;
  check(p.pair == 0 || swiglu_fits(p, elt, max_rows), ErrorKind::internal,
        "SwiGLU matmul: only the decode kernel has it");
  p.split_len = split_length(p.N, p.K, grouped, elt);
  p.splits = static_cast<int>((p.K + p.split_len - 1) / p.split_len);
  if (mma_supports(p, elt)) return run_mma(p, elt, grouped, max_rows, groups);
  const bool serial = pick_config(max_rows).serial;
  std::unique_ptr<Scratch> partial;
  if (!serial && p.splits > 1) {
    const Config c = pick_config(max_rows);
    partial = split_scratch(p, kThreads / c.g, static_cast<int64_t>(c.tm) * c.g, max_rows, groups);
  }
  auto go = [&](auto tag) {
    constexpr Elt E = decltype(tag)::value;
    if (grouped) {
      launch_elt<E, true>(p, max_rows, groups);
    } else {
      launch_elt<E, false>(p, max_rows, groups);
    }
  };
  switch (elt) {
    case Elt::f32:
      go(std::integral_constant<Elt, Elt::f32>{});
      break;
    case Elt::bf16:
      go(std::integral_constant<Elt, Elt::bf16>{});
      break;
    case Elt::f16:
      go(std::integral_constant<Elt, Elt::f16>{});
      break;
    case Elt::fp8:
      go(std::integral_constant<Elt, Elt::fp8>{});
      break;
  }
}

// Fills the weight-description fields of p from w (shape, strides, scales, alignment).
void describe_weight(const Weight& w, Params& p) {
  const int esize = static_cast<int>(dtype_size(w.w.dtype));
  p.N = w.rows();
  p.K = w.cols();
  p.ldw = w.w.stride[0];
  check(w.w.stride[1] == 1, ErrorKind::internal, "matmul: weight rows must be contiguous");
  p.vec_w = reinterpret_cast<uintptr_t>(w.w.data) % 16 == 0 && (p.ldw * esize) % 16 == 0 &&
            (p.K * esize) % 16 == 0;
  p.scale_kind = 0;
  if (!w.scale.empty()) {
    check(w.scale.dtype == DType::f32 || w.scale.dtype == DType::bf16, ErrorKind::unsupported,
          std::string("weight scales of dtype ") + dtype_name(w.scale.dtype));
    const int ve = 16 / esize;
    check(w.block_cols % ve == 0 && w.block_rows > 0, ErrorKind::unsupported,
          "CUDA matmul: scale blocks must span whole 16-byte groups of a row");
    p.scale_kind = w.scale.dtype == DType::f32 ? 1 : 2;
    p.scale_ld = w.scale.stride[w.scale.ndim - 2];
    p.block_rows = w.block_rows;
    p.block_cols = w.block_cols;
  }
}

void describe_x(const Tensor& x, Params& p) {
  check(x.stride[1] == 1, ErrorKind::internal, "matmul: x rows must be contiguous");
  p.x = x.ptr<float>();
  p.ldx = x.stride[0];
  p.vec_x = reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && p.ldx % 4 == 0;
}

}  // namespace mm

namespace {
// The Params of a plain product x · wᵀ into out (shapes checked by the caller).
mm::Params plain_params(const Tensor& x, const Weight& w, Tensor out) {
  mm::Params p{};
  mm::describe_weight(w, p);
  mm::describe_x(x, p);
  p.out = out.ptr<float>();
  p.ldo = out.stride[0];
  p.M = x.shape[0];
  p.single = mm::MatPtr{w.w.data, w.scale.empty() ? nullptr : w.scale.data};
  return p;
}
}  // namespace

void matmul(const Tensor& x, const Weight& w, Tensor out) {
  const int64_t m = x.shape[0];
  check(w.cols() == x.shape[1], ErrorKind::internal,
        "matmul: x is " + x.shape_string() + " but the weight is " + w.w.shape_string());
  check(out.shape[0] == m && out.shape[1] == w.rows() && out.stride[1] == 1, ErrorKind::internal,
        "matmul: output is " + out.shape_string());
  mm::run(plain_params(x, w, out), elt_of(w.w.dtype), false, m, 1);
}

bool matmul_swiglu_fits(const Tensor& x, const Weight& w, const Tensor& out) {
  return mm::swiglu_fits(plain_params(x, w, out), elt_of(w.w.dtype), x.shape[0]);
}

void matmul_swiglu(const Tensor& x, const Weight& w, Tensor out) {
  const int64_t m = x.shape[0], I = w.rows() / 2;
  check(w.rows() % 2 == 0 && w.cols() == x.shape[1], ErrorKind::internal,
        "matmul_swiglu: x is " + x.shape_string() + " but the weight is " + w.w.shape_string());
  check(out.shape[0] == m && out.shape[1] == I && out.stride[1] == 1, ErrorKind::internal,
        "matmul_swiglu: output is " + out.shape_string());
  mm::Params p = plain_params(x, w, out);
  const Elt elt = elt_of(w.w.dtype);
  check(mm::swiglu_fits(p, elt, m), ErrorKind::internal,
        "matmul_swiglu: the decode kernel cannot take this product");
  if (m == 0) return;
  p.pair = I;
  mm::run(p, elt, false, m, 1);  // (the split is the unfused product's: N = 2I)
}

namespace {
// Whether the decode kernel takes this product with a fused step: 1 to 8 contiguous rows of a
// width the weight has, and a weight the tensor-core kernels take.
bool fused_decode_fits(const Tensor& x, const Weight& w) {
  const int64_t rows = x.shape[0];
  // (A wrong width is the plain matmul's to report.)
  if (rows < 1 || rows > 8 || w.cols() != x.shape[1]) return false;
  if (x.stride[1] != 1 || w.w.stride[1] != 1) return false;
  mm::Params p{};
  mm::describe_weight(w, p);
  return mm::mma_supports(p, elt_of(w.w.dtype));
}
}  // namespace

// Decode (one token a sequence, at most 8), a weight the tensor-core kernels take, a conv of up to
// kFusedConvTaps taps over the first columns.
bool matmul_conv_fits(const Tensor& x, const Weight& w, const Tensor& conv_w,
                      const BatchLayout& layout) {
  const int64_t rows = x.shape[0];
  // As many sequences as tokens: one each (a sequence has at least one), so row m is sequence m.
  return layout.num_tokens == rows && layout.num_seqs == rows && conv_w.shape[1] >= 1 &&
         conv_w.shape[1] <= mm::kFusedConvTaps && conv_w.shape[0] <= w.rows() &&
         fused_decode_fits(x, w);
}

void matmul_conv(const Tensor& x, const Weight& w, const Tensor& conv_w, Tensor conv_states,
                 const BatchLayout& layout, Tensor out, Tensor conv_out) {
  const int64_t m = x.shape[0], C = conv_w.shape[0];
  check(matmul_conv_fits(x, w, conv_w, layout), ErrorKind::internal,
        "matmul_conv: the decode kernel cannot take this product");
  check(out.shape[0] == m && out.shape[1] == w.rows() && out.stride[1] == 1, ErrorKind::internal,
        "matmul_conv: output is " + out.shape_string());
  check(conv_out.shape[0] == m && conv_out.shape[1] == C && conv_out.stride[1] == 1 &&
            conv_states.shape[1] == C && conv_states.shape[2] == conv_w.shape[1] - 1,
        ErrorKind::internal, "matmul_conv: conv output or states of the wrong shape");
  mm::Params p = plain_params(x, w, out);
  p.conv_w = conv_w.ptr<float>();
  p.conv_k = static_cast<int>(conv_w.shape[1]);
  p.conv_cols = C;
  p.conv_states = conv_states.ptr<float>();
  p.conv_slots = layout.state_slot.ptr<int32_t>();
  p.conv_snaps = layout.snapshot_slot.ptr<int32_t>();
  p.conv_out = conv_out.ptr<float>();
  p.ldco = conv_out.stride[0];
  mm::run(p, elt_of(w.w.dtype), false, m, 1);
}

}  // namespace hibana::cuda
