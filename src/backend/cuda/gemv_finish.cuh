// Private to gemv_kernel.cuh: the decode matmul's epilogue — a lane's sums into the output or the
// split partials, the last CTA of a tile reducing them, and what a fused launch applies as it
// stores (SwiGLU, the DeltaNet's conv).
#pragma once

#include "backend/cuda/conv_impl.cuh"
#include "backend/cuda/matmul_impl.h"

namespace hibana::cuda::mm {

// The DeltaNet conv of the lane's outputs of columns below p.conv_cols (Params::conv_w), after
// they are stored: every element's slot, snapshot slot and taps loaded at once, then every
// window, then each output with conv_out's arithmetic (conv_kernel's bits).
template <int kOut>
__device__ __forceinline__ void conv_outputs(const Params& p, const int64_t (&orow)[kOut],
                                             const int64_t (&col)[kOut], const float (&v)[kOut]) {
  constexpr int N = kFusedConvTaps - 1;
  const int W = p.conv_k - 1;
  int32_t slot[kOut], snap[kOut];
  float wc[kOut][N], w_last[kOut], win[kOut][N];
#pragma unroll
  for (int i = 0; i < kOut; ++i) {
    const bool ok = orow[i] >= 0 && col[i] < p.conv_cols;
    slot[i] = ok ? p.conv_slots[orow[i]] : -1;
    snap[i] = ok ? p.conv_snaps[orow[i]] : -1;
    load_taps(p.conv_w, p.conv_k, ok ? col[i] : 0, ok, wc[i], w_last[i]);
    if (!ok) slot[i] = -2;  // (no output at all)
  }
#pragma unroll
  for (int i = 0; i < kOut; ++i) {
    const float* st = p.conv_states + (max(slot[i], 0) * p.conv_cols + col[i]) * W;
#pragma unroll
    for (int j = 0; j < N; ++j) win[i][j] = slot[i] >= 0 && j < W ? st[j] : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kOut; ++i) {
    if (slot[i] == -2) continue;
    float* o = p.conv_out + orow[i] * p.ldco + col[i];
    if (slot[i] < 0) {  // a padding row of a captured decode batch: no state, zero output
      *o = 0.0f;
      continue;
    }
    *o = conv_out(wc[i], w_last[i], win[i], W, v[i]);
    conv_shift(win[i], W, v[i]);
    conv_store(p.conv_states + (static_cast<int64_t>(slot[i]) * p.conv_cols + col[i]) * W, win[i],
               W);
    if (snap[i] >= 0) {
      conv_store(p.conv_states + (static_cast<int64_t>(snap[i]) * p.conv_cols + col[i]) * W, win[i],
                 W);
    }
  }
}

// What a decode kernel applies to its outputs as it stores them, a template argument so that
// each kernel carries only its own epilogue's code: nothing, SwiGLU (Params::pair) or, in plain
// products only, the DeltaNet conv (Params::conv_w). The conv's code in every plain kernel made
// the 80B's fp8 one 7 KB larger (cubin: 45824 against 38528 bytes with the store below
// inlined once).
enum class Fused { none, swiglu, conv };

// The output row of each of the lane's four sums (-1: none; finish's rows, below). Grouped,
// from the group's row list, read once (a store could alias the list for the compiler, which
// would read it again). The kernel reads them after its loop: read before it (the loads'
// round trip overlapping the weight stream) the 80B ran 0.994 at batch 1 and 0.990 at batch 8
// (twenty-first slice: four more registers held through the loop).
template <bool kGrouped, bool kPacked>
__device__ __forceinline__ void out_rows(const int32_t* rows, int64_t rows_here, bool okA,
                                         bool okB, int t, int32_t (&orow)[4],
                                         int known_row) {
  // Sums i and i + 2 are of the same token (rows rA and rB): its row is read once. Packed, sum
  // i of token t / 2 in the even lanes (i even); unpacked, of token 2t + (i & 1).
  int32_t row[2];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int m = kPacked ? t / 2 : 2 * t + j;
    const bool here = m < rows_here && !(kPacked && ((t & 1) || j == 1));
    // (L2: a routing_ready kernel reads the list before its wait)
    // (known_row >= 0: the group's one row, known without the list: Params::slice_known)
    row[j] = !here ? -1 : !kGrouped ? m : known_row >= 0 ? known_row : __ldcg(rows + m);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) orow[i] = (i < 2 ? okA : okB) ? row[i & 1] : -1;
}

// The lane's sums into out (one split) or the split partials, the last CTA of a tile adding
// them in split order. total[0], total[1] are row rA, total[2], total[3] row rB; unpacked, of
// tokens 2t and 2t + 1; packed, total[0] and total[2] of token t / 2 in the even lanes; out
// rows from out_rows. Fused::swiglu: rows rA and rB are a gate row and its up row, and the
// token's output at column rA is silu(gate) * up (each sum as the unfused product would store
// it). Fused::conv (plain products only: matmul_conv) applies the conv to the stored outputs.
// kOneSplit: p.splits is 1 (the split-K reduction's code is left out).
template <bool kGrouped, Fused kFused, bool kOneSplit>
__device__ __forceinline__ void finish(const Params& p, const float (&total)[4],
                                       const int32_t (&out_row)[4], int my_split, int64_t rA,
                                       int64_t rB) {
  static_assert(!(kGrouped && kFused == Fused::conv), "the conv follows plain products only");
  int64_t orow[4], col[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    orow[i] = out_row[i];
    col[i] = i < 2 ? rA : rB;
  }
  // The four sums: the lane's own (one split), or the tile's splits added in split order by its
  // last CTA to finish. Then one store for both ways: its code (the conv's too) inlined once,
  // not twice (-5.6 KB in the 80B's plain fp8 kernel).
  float v[4];
  if (kOneSplit || p.splits == 1) {
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = total[i];
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (orow[i] >= 0) {
        p.partial[(static_cast<int64_t>(my_split) * p.M + orow[i]) * p.N + col[i]] = total[i];
      }
    }
    const int64_t tile = static_cast<int64_t>(blockIdx.z) * gridDim.x + blockIdx.x;
    if (!last_to_finish(p.counters + tile, p.splits)) return;
    // Every sum before any store (a store to out could alias a later partial for the
    // compiler); the four sums' loads at once (elements without an output read a valid one,
    // unused).
    int64_t elem[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) elem[i] = max(orow[i], int64_t{0}) * p.N + min(col[i], p.N - 1);
    split_sums(p.partial, elem, p.M * p.N, p.splits, v);
  }
  // The outputs: one per token of the pair of rows (SwiGLU), else one per sum.
  if constexpr (kFused == Fused::swiglu) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if (orow[i] >= 0) p.out[orow[i] * p.ldo + col[i]] = silu_mul_f(v[i], v[i + 2]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (orow[i] >= 0) p.out[orow[i] * p.ldo + col[i]] = v[i];
    }
    if constexpr (kFused == Fused::conv) conv_outputs(p, orow, col, v);
  }
}

}  // namespace hibana::cuda::mm
