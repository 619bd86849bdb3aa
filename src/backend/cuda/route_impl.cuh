// Private to the CUDA routing (moe_route.cu) and the router's decode product that routes its
// token itself (gemv_kernel.cuh, Fused::route): one token's softmax and top-k by a warp
// (route_token) or by a CTA (route_one_token), and one token's grouping (group_one_token).
// Every form picks the same experts with the same weights.
#pragma once

#include <cassert>
#include <climits>
#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/moe_impl.h"

namespace hibana::cuda {

// What the top-k compares, as unsigned integers that order as the values do: 0 for an expert
// already taken (or past E), 1 for a NaN probability (a token whose hidden state is not finite
// — e.g. a padding row of a recorded decode batch — so every round still picks a valid expert
// and no index is computed from a NaN), and a probability p >= 0 as its bits + 2 (non-negative
// floats order as their bits).
__device__ __forceinline__ unsigned prob_key(float p) {
  return p != p ? 1u : __float_as_uint(p + 0.0f) + 2u;
}

// A token's picks as its warp's rounds find them: lane j keeps the j-th, and every lane the
// total of the picks' probabilities (summed in the rounds' order).
struct Picks {
  float total = 0.0f, mine = 0.0f;
  int mine_e = 0;
};

// Round j of token t's top-k, over one (key, expert) per lane: the largest key and the lowest
// expert holding it (two warp reductions). Returns the expert; more than 32 picks are stored
// in their rounds.
__device__ __forceinline__ int take_pick(const RouteArgs& a, int64_t t, int lane, int j,
                                         unsigned key, unsigned expert, Picks& p) {
  const unsigned top = __reduce_max_sync(~0u, key);
  const int best_e = static_cast<int>(__reduce_min_sync(~0u, key == top ? expert : UINT_MAX));
  const float best = top >= 2u ? __uint_as_float(top - 2u) : 0.0f;  // a NaN's pick weighs 0
  if (lane == j) {
    p.mine = best;
    p.mine_e = best_e;
  }
  if (a.k > 32 && lane == 0) {
    a.ids[t * a.ldo + j] = best_e;
    a.weights[t * a.ldo + j] = best;
  }
  p.total += best;
  return best_e;
}

// Stores token t's picks after its k rounds, and the shared expert's pair (gate: its logit).
// Returns the expert of pair `lane` where the token's pairs fit the warp (k, with a shared
// expert k + 1, at most 32), else -1.
__device__ __forceinline__ int store_picks(const RouteArgs& a, int64_t t, int lane, const Picks& p,
                                           float gate) {
  const int k = a.k;
  // Up to 32 picks, lane j kept the j-th and stores it, divided by the total where asked, all
  // at once; more picks went out in their rounds and are divided here (load, divide, store).
  if (k <= 32) {
    if (lane < k) {
      a.ids[t * a.ldo + lane] = p.mine_e;
      a.weights[t * a.ldo + lane] = a.renormalise ? p.mine / p.total : p.mine;
    }
  } else if (a.renormalise && lane == 0) {
    for (int j = 0; j < k; ++j) a.weights[t * a.ldo + j] /= p.total;
  }
  if (a.shared_gate && lane == 0) {
    a.ids[t * a.ldo + k] = static_cast<int32_t>(a.E);
    a.weights[t * a.ldo + k] = sigmoid_f(gate);
  }
  if (a.ldo > 32) return -1;
  return lane < k ? p.mine_e : lane < a.ldo ? static_cast<int>(a.E) : -1;
}

// Lane l holds the keys of experts l, l + 32, ...: in registers when E <= 32 * kPer (the decode
// case: no memory traffic between the rounds), else in `keys`. Both forms pick the same experts
// with the same weights. Each round a lane finds its largest key (the lowest expert among equal
// keys: a tree of adjacent pairs, whose right halves hold the higher experts), then the warp
// the largest of those and the lowest expert holding it (take_pick).
// Returns store_picks' expert of pair `lane`.
template <int kPer>
__device__ __forceinline__ int route_token(const RouteArgs& a, int64_t t, int lane) {
  const int64_t E = a.E;
  const int k = a.k;
  const float gate = a.shared_gate ? __ldcg(a.shared_gate + t * a.ldg) : 0.0f;  // (with the logits)
  const float* l = a.logits + t * a.ldl;
  unsigned* mem = kPer > 0 ? nullptr : a.keys + t * E;
  unsigned reg[kPer > 0 ? kPer : 1];
  const int n = kPer > 0 ? kPer : static_cast<int>((E + 31) / 32);
  auto at = [&](int i) -> unsigned& {
    if constexpr (kPer > 0) return reg[i];
    return mem[lane + 32 * i];
  };
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < n; ++i) {
    if (lane + 32 * i < E) mx = fmaxf(mx, __ldcg(l + lane + 32 * i));
  }
  mx = warp_max(mx);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < n; ++i) {
    if (lane + 32 * i < E) {
      const float e = expf(__ldcg(l + lane + 32 * i) - mx);
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
  Picks p;
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
    const int best_e = take_pick(a, t, lane, j, key, static_cast<unsigned>(lane + 32 * slot), p);
#pragma unroll
    for (int i = 0; i < n; ++i) {
      if (lane + 32 * i == best_e) at(i) = 0u;  // taken
    }
  }
  return store_picks(a, t, lane, p, gate);
}

// One token's grouping from its pairs' experts, lane j's the j-th (-1: none), in one warp: what
// group_pairs would give, without its barriers. The token's pairs go to distinct experts (the
// top-k's picks, and the shared expert past them), so each active expert has one row and one
// tile: a pair's place in the grouped order is the number of pairs with a lower expert (32
// exchanges between the lanes). Of offsets it writes only what the grouped launches read, the
// entries of the active experts and the ones after them (Grouping).
__device__ __forceinline__ void group_one_token(const GroupArgs& g, int e, int lane) {
  const bool valid = e >= 0 && e < g.E;            // (group_pairs skips ids outside [0, E) too)
  const unsigned same = __match_any_sync(~0u, e);  // (every lane calls it)
  assert(!valid || __popc(same) == 1);             // distinct experts
  (void)same;
  int below = 0;  // this pair's place: the pairs with a lower expert
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int x = __shfl_sync(~0u, e, j);
    below += x >= 0 && x < e;  // (x < e < E where this pair is valid)
  }
  const unsigned pairs = __reduce_add_sync(~0u, valid ? 1u : 0u);
  if (valid) {
    g.offsets[e] = below;  // (where e + 1 is active too, both write below + 1 there)
    g.offsets[e + 1] = below + 1;
    g.rows[below] = lane;
    g.active[below] = e;
    g.tile_start[below] = below;
  }
  if (lane == 0) {
    *g.n_active = static_cast<int32_t>(pairs);
    g.tile_start[pairs] = static_cast<int32_t>(pairs);
  }
}

// Most experts route_one_kernel takes (one a thread).
constexpr int kOneTokenExperts = 1024;

// route_one_token's shared memory.
struct RouteOneSmem {
  float max[32];
  float exp[kOneTokenExperts];
  float sum;
  unsigned top[32], n;
  uint2 cand[32];
};

// route_and_group for one token whose pairs fit a warp, by one CTA: thread x holds the logits
// of experts x, x + blockDim.x, ... (P of them; P * blockDim.x >= E, E <= kOneTokenExperts and
// a.ldo <= 32, checked by the callers). The softmax is route_token's, bit for bit (its max, and
// its sum in its order: lane l's experts l, l + 32, ... in turn, then the warp's butterfly).
// The top-k goes through candidates: each warp's m = ceil(k / warps) largest keys (repeats
// allowed, 0 for the experts past E) are warps * m >= k keys, so tau, the k-th largest of them
// (at least 1: every expert's key is), is at most the k-th largest key, and every pick holds a
// key >= tau. Where k to 32 keys reach tau (the usual case, ~k) they are gathered and warp 0
// takes the k rounds over them (take_pick, one key a lane); else warp 0 routes the token as
// route_token does: ties (equal logits, a NaN row), warps * m > 32 (no tau), or a tau pushed
// to 1 by warps with fewer than m experts. Either way the same picks in the same order with
// the same weights, as every routing kernel gives. Then warp 0 groups the pairs
// (group_one_token). The logits are read from L2 (the router's CTAs may have written them).
// Against the warp that did all of it (route_token, then 17 passes over the offsets: ~3,600
// instructions in series, 13,668 cycles under Nsight Compute on the 80B; docs/benchmarks.md,
// twenty-fourth slice), each thread has a few hundred instructions and little code.
template <int kPer, int P>
__device__ __forceinline__ void route_one_token(const RouteArgs& a, const GroupArgs& g,
                                                RouteOneSmem& s) {
  const int x = threadIdx.x, lane = x % 32, warp = x / 32, warps = blockDim.x / 32;
  const int E = static_cast<int>(a.E), k = a.k, stride = blockDim.x;
  if (x == 0) s.n = 0u;
  float lx[P];
  float lmax = -INFINITY;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int e = x + i * stride;
    lx[i] = e < E ? __ldcg(a.logits + e) : -INFINITY;
    lmax = fmaxf(lmax, lx[i]);
  }
  const float gate = a.shared_gate && x == 0 ? __ldcg(a.shared_gate) : 0.0f;
  const float wmax = warp_max(lmax);
  if (lane == 0) s.max[warp] = wmax;
  __syncthreads();
  float mx = -INFINITY;
  for (int i = 0; i < warps; ++i) mx = fmaxf(mx, s.max[i]);  // (max: any order, the same bits)
  float ex[P];
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int e = x + i * stride;
    ex[i] = e < E ? expf(lx[i] - mx) : 0.0f;
    if (e < E) s.exp[e] = ex[i];
  }
  __syncthreads();
  if (warp == 0) {
    float sum = 0.0f;
    for (int i = lane; i < E; i += 32) sum = __fadd_rn(sum, s.exp[i]);
    sum = warp_sum(sum);
    if (lane == 0) s.sum = sum;
  }
  __syncthreads();
  unsigned key[P], v[P];
#pragma unroll
  for (int i = 0; i < P; ++i) {
    key[i] = x + i * stride < E ? prob_key(ex[i] / s.sum) : 0u;
    v[i] = key[i];
  }
  const int m = (k + warps - 1) / warps, tops = warps * m;
  for (int j = 0; j < m; ++j) {
    unsigned best = v[0];  // the thread's largest remaining key, its index
    int at = 0;
#pragma unroll
    for (int i = 1; i < P; ++i) {
      if (v[i] > best) {
        best = v[i];
        at = i;
      }
    }
    const unsigned top = __reduce_max_sync(~0u, best);
    const unsigned who = __reduce_min_sync(~0u, best == top ? static_cast<unsigned>(lane) : 32u);
#pragma unroll
    for (int i = 0; i < P; ++i) {
      if (static_cast<unsigned>(lane) == who && i == at) v[i] = 0u;
    }
    if (lane == 0 && warp * m + j < 32) s.top[warp * m + j] = top;
  }
  __syncthreads();
  unsigned tau = UINT_MAX;  // (more than 32 tops: no candidates, the rounds over every key)
  if (tops <= 32) {
    const unsigned mine = lane < tops ? s.top[lane] : 0u;
    int rank = 0;  // among the tops, larger first, then by place
    for (int i = 0; i < tops; ++i) {
      const unsigned o = s.top[i];
      rank += o > mine || (o == mine && i < lane);
    }
    tau = max(__reduce_max_sync(~0u, lane < tops && rank == k - 1 ? mine : 0u), 1u);
  }
  // The candidates (tau >= 1: the keys past E are 0), the first 32 gathered; s.n counts all.
#pragma unroll
  for (int i = 0; i < P; ++i) {
    if (key[i] >= tau) {
      const unsigned slot = atomicAdd(&s.n, 1u);
      if (slot < 32u) s.cand[slot] = make_uint2(key[i], static_cast<unsigned>(x + i * stride));
    }
  }
  __syncthreads();
  const int count = static_cast<int>(s.n);
  if (warp != 0) return;
  int e;
  if (count >= k && count <= 32) {
    const uint2 c = lane < count ? s.cand[lane] : make_uint2(0u, UINT_MAX);
    unsigned ckey = c.x;
    Picks p;
    for (int j = 0; j < k; ++j) {
      if (take_pick(a, 0, lane, j, ckey, c.y, p) == static_cast<int>(c.y)) ckey = 0u;  // taken
    }
    e = store_picks(a, 0, lane, p, gate);
  } else {
    e = route_token<kPer>(a, 0, lane);
  }
  group_one_token(g, e, lane);
}

}  // namespace hibana::cuda
