// Private to the CUDA MoE routing (moe_route.cu) and the grouped decode matmul that routes one
// token itself (matmul_gemv.cu, Params::route): a token's softmax over its router logits and
// top-k by one warp, and the slice of the grouping a CTA serves.
#pragma once

#include <cassert>
#include <climits>
#include <cmath>
#include <cstdint>

#include "backend/cuda/common.cuh"

namespace hibana::cuda {

struct RouteArgs {
  const float* logits;
  int64_t ldl, T, E;
  int k;
  bool renormalise;
  const float* shared_gate;  // [T] logits of the shared expert's gate (ldg apart), or null
  int64_t ldg;
  int32_t* ids;  // rows ldo apart: k, or k + 1 with a shared expert
  float* weights;
  int64_t ldo;
  unsigned* keys;  // [T, E] when the keys do not fit in registers (kPer == 0)
};

// What the top-k compares, as unsigned integers that order as the values do: 0 for an expert
// already taken (or past E), 1 for a NaN probability (a token whose hidden state is not finite
// — e.g. a padding row of a recorded decode batch — so every round still picks a valid expert
// and no index is computed from a NaN), and a probability p >= 0 as its bits + 2 (non-negative
// floats order as their bits).
__device__ __forceinline__ unsigned prob_key(float p) {
  return p != p ? 1u : __float_as_uint(p + 0.0f) + 2u;
}

// Lane l holds the keys of experts l, l + 32, ...: in registers when E <= 32 * kPer (the decode
// case: no memory traffic between the rounds), else in `keys`. Both forms pick the same experts
// with the same weights. Each round a lane finds its largest key (the lowest expert among equal
// keys: a tree of adjacent pairs, whose right halves hold the higher experts), then the warp
// the largest of those and the lowest expert holding it (two warp reductions).
// Returns the expert of pair `lane` of the token where its pairs fit the warp (k, with a shared
// expert k + 1, at most 32), else -1. kStore: the ids and weights are stored; otherwise (pairs
// that fit the warp only) nothing is, and *weight gets pair `lane`'s weight. The logits come
// from L2: a decode matmul that routes (Params::route) reads them where its SM's L1 may hold
// an older step's.
template <int kPer, bool kStore = true>
__device__ __forceinline__ int route_token(const RouteArgs& a, int64_t t, int lane,
                                           float* weight = nullptr) {
  const int64_t E = a.E;
  const int k = a.k;
  // (loaded with the logits)
  const float gate = a.shared_gate ? __ldcg(a.shared_gate + t * a.ldg) : 0.0f;
  const float* l = a.logits + t * a.ldl;
  unsigned* mem = kPer > 0 ? nullptr : a.keys + t * E;
  unsigned reg[kPer > 0 ? kPer : 1];
  const int n = kPer > 0 ? kPer : static_cast<int>((E + 31) / 32);
  auto at = [&](int i) -> unsigned& {
    if constexpr (kPer > 0) return reg[i];
    return mem[lane + 32 * i];
  };
  // The logits are loaded once where the keys are registers (their bits held there until the
  // exponentials replace them), twice where the keys are in memory.
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < n; ++i) {
    if (lane + 32 * i < E) {
      const float v = __ldcg(l + lane + 32 * i);
      if constexpr (kPer > 0) reg[i] = __float_as_uint(v);
      mx = fmaxf(mx, v);
    }
  }
  mx = warp_max(mx);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < n; ++i) {
    if (lane + 32 * i < E) {
      const float v = kPer > 0 ? __uint_as_float(at(i)) : __ldcg(l + lane + 32 * i);
      const float e = expf(v - mx);
      at(i) = __float_as_uint(e);
      sum = __fadd_rn(sum, e);  // (never contracted with expf's last multiply: every kernel alike)
    } else if constexpr (kPer > 0) {
      at(i) = 0u;
    }
  }
  sum = warp_sum(sum);
#pragma unroll
  for (int i = 0; i < n; ++i) {
    if (lane + 32 * i < E) at(i) = prob_key(__uint_as_float(at(i)) / sum);
  }
  float total = 0.0f, mine = 0.0f;
  int mine_e = 0;
  for (int j = 0; j < k; ++j) {
    unsigned key = 0u;
    int slot = 0;
    if constexpr (kPer > 0) {
      unsigned kk[kPer];
      int ks[kPer];
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        kk[i] = reg[i];
        ks[i] = i;
      }
#pragma unroll
      for (int w = 1; w < kPer; w *= 2) {
#pragma unroll
        for (int i = 0; i + w < kPer; i += 2 * w) {
          if (kk[i + w] > kk[i]) {
            kk[i] = kk[i + w];
            ks[i] = ks[i + w];
          }
        }
      }
      key = kk[0];
      slot = ks[0];
    } else {
      for (int i = 0; i < n; ++i) {
        const unsigned v = lane + 32 * i < E ? at(i) : 0u;
        if (v > key) {
          key = v;
          slot = i;
        }
      }
    }
    const unsigned top = __reduce_max_sync(0xffffffffu, key);
    const int best_e = static_cast<int>(__reduce_min_sync(
        0xffffffffu, key == top ? static_cast<unsigned>(lane + 32 * slot) : UINT_MAX));
    const float best = top >= 2u ? __uint_as_float(top - 2u) : 0.0f;  // a NaN's pick weighs 0
    if (lane == j) {
      mine = best;
      mine_e = best_e;
    }
    if (kStore && k > 32 && lane == 0) {
      a.ids[t * a.ldo + j] = best_e;
      a.weights[t * a.ldo + j] = best;
    }
    total += best;
#pragma unroll
    for (int i = 0; i < n; ++i) {
      if (lane + 32 * i == best_e) at(i) = 0u;  // taken
    }
  }
  // Up to 32 picks, lane j kept the j-th and stores it, divided by the total where asked, all
  // at once; more picks went out in their rounds and are divided here (load, divide, store).
  if (!kStore) {
    assert(a.ldo <= 32);
    *weight = lane < k ? (a.renormalise ? mine / total : mine) : sigmoid_f(gate);
  } else if (k <= 32) {
    if (lane < k) {
      a.ids[t * a.ldo + lane] = mine_e;
      a.weights[t * a.ldo + lane] = a.renormalise ? mine / total : mine;
    }
  } else if (a.renormalise && lane == 0) {
    for (int j = 0; j < k; ++j) a.weights[t * a.ldo + j] /= total;
  }
  if (kStore && a.shared_gate && lane == 0) {
    a.ids[t * a.ldo + k] = static_cast<int32_t>(E);
    a.weights[t * a.ldo + k] = sigmoid_f(gate);
  }
  if (a.ldo > 32) return -1;
  return lane < k ? mine_e : lane < a.ldo ? static_cast<int>(E) : -1;
}

// The keys a lane holds where a decode matmul routes (Params::route), and so the most experts
// it routes.
constexpr int kRoutedKeysPerLane = 16;
constexpr int kMaxRoutedExperts = 32 * kRoutedKeysPerLane;

// Where a grouped launch's slice z is served by one token's routing (Params::route; the token's
// pairs fit the warp): every lane of the warp routes the token (route_token, storing nothing),
// and the pairs, of distinct experts, are ordered by expert as route_one_kernel groups them.
// Gives slice z's expert and pair (its index among the token's), and, with `store`, stores the
// ids and weights route_token would; false where the token has no z-th pair.
template <int kPer>
__device__ __forceinline__ bool routed_slice(const RouteArgs& a, int z, bool store, int& expert,
                                             int& pair) {
  const int lane = threadIdx.x % 32;
  float w = 0.0f;
  const int e = route_token<kPer, false>(a, 0, lane, &w);
  const bool valid = e >= 0;
  if (store && valid) {
    a.ids[lane] = e;
    a.weights[lane] = w;
  }
  int below = 0;  // the pairs with a lower expert
  for (int i = 0; i < a.ldo; ++i) {
    const int other = __shfl_sync(~0u, e, i);
    below += other >= 0 && other < e;
  }
  const unsigned mine = __ballot_sync(~0u, valid && below == z);
  if (mine == 0u) return false;
  pair = __ffs(mine) - 1;
  expert = __shfl_sync(~0u, e, pair);
  return true;
}

}  // namespace hibana::cuda
