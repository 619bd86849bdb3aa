// Private to the CUDA MoE (moe.cu) and the decode matmul that ends in the combine
// (gemv_finish.cuh, Params::combine): the weighted combine of a token's expert outputs, and the
// residual stream and norm a combine may take after it, so that every kernel doing them has the
// same bits.
#pragma once

#include <cstdint>

#include "backend/cuda/common.cuh"

namespace hibana::cuda {

// The pairs' outputs y [T * k, H] and their weights and ids [T, k]: what the combine adds.
struct Pairs {
  const float* y;
  const float* weights;
  const int32_t* ids;
  int k;
  int64_t H;
};

// The residual stream and the next layer's input norm (add_rmsnorm's wide kernel) that the
// combine's kernel takes: x[t] += out[t], normed[t] = rmsnorm(x[t]).
struct ResidualArgs {
  float* x;
  int64_t ldx;
  const float* w;
  float eps;
  bool zero_centred;
  float* normed;
  int64_t ldn;
};

// sum_j weights[t, j] * y[t * k + j][c], j ascending, pairs with id -1 skipped (their y row was
// never written). kBatch pairs' ids, weights and outputs are loaded before any is used: one
// round trip per batch of pairs. y has a row for every pair, used or not, so the loads are in
// bounds. (16 pairs a round trip, the 80B's 11 in one, measured the same: 1.004 and 0.999 at
// batch 1 and 8, twenty-first slice.) kL2: y is read from L2, where other CTAs of the same
// kernel wrote it.
template <bool kL2 = false>
__device__ __forceinline__ float combine_column(const Pairs& p, int64_t t, int64_t c) {
  constexpr int kBatch = 8;
  const int k = p.k;
  float acc = 0.0f;
  for (int j0 = 0; j0 < k; j0 += kBatch) {
    int32_t id[kBatch];
    float wv[kBatch], yv[kBatch];
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
      const int64_t j = t * k + min(j0 + q, k - 1);
      id[q] = j0 + q < k ? p.ids[j] : -1;
      wv[q] = p.weights[j];
      yv[q] = kL2 ? __ldcg(p.y + j * p.H + c) : p.y[j * p.H + c];
    }
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
      if (id[q] >= 0) acc = fmaf(wv[q], yv[q], acc);
    }
  }
  return acc;
}

}  // namespace hibana::cuda
