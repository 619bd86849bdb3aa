// MoE routing on CUDA: each token's softmax over its router logits and top-k (one warp per
// token), the grouping of the (token, slot) pairs by expert that the grouped expert launches
// read, and both in one launch for a decode batch.
#include <climits>
#include <cmath>
#include <type_traits>

#include "backend/cuda/matmul_impl.h"
#include "backend/cuda/moe_impl.h"
#include "backend/cuda/ops.h"

namespace hibana::cuda {

namespace {

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
// expert k + 1, at most 32), else -1.
template <int kPer>
__device__ __forceinline__ int route_token(const RouteArgs& a, int64_t t, int lane) {
  const int64_t E = a.E;
  const int k = a.k;
  const float gate = a.shared_gate ? a.shared_gate[t * a.ldg] : 0.0f;  // (loaded with the logits)
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
    if (lane + 32 * i < E) mx = fmaxf(mx, l[lane + 32 * i]);
  }
  mx = warp_max(mx);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < n; ++i) {
    if (lane + 32 * i < E) {
      const float e = expf(l[lane + 32 * i] - mx);
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
    if (k > 32 && lane == 0) {
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
  if (k <= 32) {
    if (lane < k) {
      a.ids[t * a.ldo + lane] = mine_e;
      a.weights[t * a.ldo + lane] = a.renormalise ? mine / total : mine;
    }
  } else if (a.renormalise && lane == 0) {
    for (int j = 0; j < k; ++j) a.weights[t * a.ldo + j] /= total;
  }
  if (a.shared_gate && lane == 0) {
    a.ids[t * a.ldo + k] = static_cast<int32_t>(E);
    a.weights[t * a.ldo + k] = sigmoid_f(gate);
  }
  if (a.ldo > 32) return -1;
  return lane < k ? mine_e : lane < a.ldo ? static_cast<int>(E) : -1;
}

template <int kPer>
__global__ void moe_route_kernel(RouteArgs a) {
  pdl_start();
  const int64_t t = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (t < a.T) route_token<kPer>(a, t, threadIdx.x % 32);
}

struct GroupArgs {
  const int32_t* ids;
  int64_t pairs;
  int E;
  int32_t *offsets, *rows, *active, *n_active, *tile_start;
};

GroupArgs group_args(const int32_t* ids, const Grouping& g) {
  return {ids,
          g.pairs,
          g.E,
          g.offsets.as<int32_t>(),
          g.rows.as<int32_t>(),
          g.active.as<int32_t>(),
          g.n_active(),
          g.tile_start()};
}

// Groups the pairs by expert (Grouping). One CTA of up to 1024 threads, with 2 * E int32 of
// dynamic shared memory; each thread owns a contiguous run of experts, and a block-wide scan of
// the runs' (rows, experts used, tiles) gives every thread where its run starts.
__device__ __forceinline__ void group_pairs(const GroupArgs& g) {
  extern __shared__ int32_t counts[];  // [E] counts, then [E] cursors
  __shared__ int32_t warp_total[3][32];
  const int E = g.E;
  const int64_t pairs = g.pairs;
  int32_t* cursor = counts + E;
  for (int e = threadIdx.x; e < E; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  // A thread's first kHeld ids stay in registers for the last pass (reloaded there, they would
  // wait behind the stores before it, which may alias them for the compiler); more pairs than
  // kHeld per thread (long prefills) reload the rest.
  constexpr int kHeld = 4;
  const int64_t held_pairs = static_cast<int64_t>(kHeld) * blockDim.x;
  int held[kHeld];
#pragma unroll
  for (int r = 0; r < kHeld; ++r) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(r) * blockDim.x;
    held[r] = i < pairs ? g.ids[i] : -1;
  }
#pragma unroll
  for (int r = 0; r < kHeld; ++r) {
    if (held[r] >= 0 && held[r] < E) atomicAdd(&counts[held[r]], 1);
  }
  for (int64_t i = held_pairs + threadIdx.x; i < pairs; i += blockDim.x) {
    const int e = g.ids[i];
    if (e >= 0 && e < E) atomicAdd(&counts[e], 1);
  }
  __syncthreads();
  auto tiles_of = [](int32_t c) { return (c + mm::kTiledTokens - 1) / mm::kTiledTokens; };
  const int per = (E + blockDim.x - 1) / blockDim.x;
  const int lo = min(E, static_cast<int>(threadIdx.x) * per), hi = min(E, lo + per);
  int32_t mine[3] = {0, 0, 0};  // rows, experts used, tiles of this thread's run
  for (int e = lo; e < hi; ++e) {
    mine[0] += counts[e];
    mine[1] += counts[e] > 0;
    mine[2] += tiles_of(counts[e]);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int32_t before[3];
#pragma unroll
  for (int v = 0; v < 3; ++v) {
    int32_t incl = mine[v];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t y = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += y;
    }
    if (lane == 31) warp_total[v][warp] = incl;
    before[v] = incl - mine[v];
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / 32;
#pragma unroll
    for (int v = 0; v < 3; ++v) {
      int32_t incl = lane < warps ? warp_total[v][lane] : 0;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int32_t y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
      }
      if (lane < warps) warp_total[v][lane] = incl;  // inclusive over warps
    }
  }
  __syncthreads();
  int32_t run = before[0], used = before[1], tiles = before[2];
  if (warp > 0) {
    run += warp_total[0][warp - 1];
    used += warp_total[1][warp - 1];
    tiles += warp_total[2][warp - 1];
  }
  for (int e = lo; e < hi; ++e) {
    g.offsets[e] = run;
    cursor[e] = run;
    run += counts[e];
    if (counts[e] > 0) {
      g.tile_start[used] = tiles;
      tiles += tiles_of(counts[e]);
      g.active[used++] = e;
    }
  }
  if (threadIdx.x == blockDim.x - 1) {  // its run ends the list: the totals
    g.offsets[E] = run;
    g.tile_start[used] = tiles;
    *g.n_active = used;
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < kHeld; ++r) {
    const int e = held[r];
    const int64_t i = threadIdx.x + static_cast<int64_t>(r) * blockDim.x;
    if (e >= 0 && e < E) g.rows[atomicAdd(&cursor[e], 1)] = static_cast<int32_t>(i);
  }
  for (int64_t i = held_pairs + threadIdx.x; i < pairs; i += blockDim.x) {
    const int e = g.ids[i];
    if (e >= 0 && e < E) g.rows[atomicAdd(&cursor[e], 1)] = static_cast<int32_t>(i);
  }
}

constexpr int kGroupThreads = 1024;

__global__ void __launch_bounds__(kGroupThreads) group_by_expert_kernel(GroupArgs g) {
  pdl_start();
  group_pairs(g);
}

// route_and_group: warp w routes tokens w, w + 32, ... (at most one each), then the whole CTA
// groups the pairs they stored (a CTA's global stores are visible to it past the barrier).
template <int kPer>
__global__ void __launch_bounds__(kGroupThreads) route_group_kernel(RouteArgs a, GroupArgs g) {
  pdl_start();
  const int warps = blockDim.x / 32;
  for (int64_t t = threadIdx.x / 32; t < a.T; t += warps) route_token<kPer>(a, t, threadIdx.x % 32);
  __syncthreads();
  group_pairs(g);
}

// route_and_group for one token (decode at batch 1), one warp: the routing as above, then the
// grouping group_pairs would give, without its barriers. The token's pairs go to distinct
// experts (the top-k's picks, and the shared expert past them), so each active expert has one
// row and one tile: a pair's place in the grouped order is offsets[its expert], the number of
// pairs with a lower expert. offsets[x] is found 32 experts at a time from the bits of the
// experts the warp's pairs hold in that range. Against route_group_kernel's
// 1024 threads: 6.2 -> 4.7 us of the 80B's batch-1 step per MoE layer, the step 1.032 times as
// fast on an H100 (tools/gpu/check.sh timeline and ab; docs/benchmarks.md, nineteenth slice).
// (route_group_kernel with one warp instead of 1024 threads was slower: 6.9 us.)
template <int kPer>
__global__ void __launch_bounds__(32) route_one_kernel(RouteArgs a, GroupArgs g) {
  pdl_start();
  const int lane = threadIdx.x;
  const int e = route_token<kPer>(a, 0, lane), E = g.E;
  const bool valid = e >= 0 && e < E;  // (group_pairs skips ids outside [0, E) too)
  const unsigned same = __match_any_sync(~0u, e);  // (every lane calls it)
  assert(!valid || __popc(same) == 1);              // distinct experts
  (void)same;
  int below = 0, base = 0;  // below: this pair's place, the pairs with a lower expert
  for (int x0 = 0; x0 <= E; x0 += 32) {
    const bool here = valid && e >= x0 && e < x0 + 32;
    const unsigned bits = __reduce_or_sync(~0u, here ? 1u << (e - x0) : 0u);
    if (x0 + lane <= E) g.offsets[x0 + lane] = base + __popc(bits & ((1u << lane) - 1u));
    if (here) below = base + __popc(bits & ((1u << (e - x0)) - 1u));
    base += __popc(bits);
  }
  if (valid) {
    g.rows[below] = lane;
    g.active[below] = e;
    g.tile_start[below] = below;
  }
  if (lane == 0) {  // base: every valid pair
    *g.n_active = base;
    g.tile_start[base] = base;
  }
}

// Whether route_and_group routes and groups in one warp (route_one_kernel): one token whose
// pairs (k, with a shared expert k + 1) fit a warp.
bool routes_by_one_warp(int64_t tokens, int64_t pairs_per_token) {
  return tokens == 1 && pairs_per_token <= 32;
}

RouteArgs route_args(const Tensor& logits, int64_t k, bool renormalise, const Tensor& shared_gate,
                     Tensor ids, Tensor weights) {
  const int64_t E = logits.shape[1];
  const bool shared = !shared_gate.empty();
  check(k >= 1 && k <= E, ErrorKind::internal, "moe_route: top-k out of range");
  check(ids.is_contiguous() && weights.is_contiguous(), ErrorKind::internal,
        "moe_route: outputs must be contiguous");
  check(ids.shape[1] == k + shared && weights.shape[1] == k + shared, ErrorKind::internal,
        "moe_route: ids and weights need k (+1 with a shared expert) columns");
  RouteArgs a{};
  a.logits = logits.ptr<float>();
  a.ldl = ld(logits);
  a.T = logits.shape[0];
  a.E = E;
  a.k = static_cast<int>(k);
  a.renormalise = renormalise;
  a.shared_gate = shared ? shared_gate.ptr<float>() : nullptr;
  a.ldg = shared ? ld(shared_gate) : 0;
  a.ids = ids.ptr<int32_t>();
  a.weights = weights.ptr<float>();
  a.ldo = k + shared;
  return a;
}

// Calls go(std::integral_constant<int, kPer>) with the kPer that holds E experts' keys in
// registers, or 0 with a.keys set to scratch for T rows of keys.
template <typename Go>
void with_keys_per_lane(RouteArgs& a, Go go) {
  if (a.E <= 128) return go(std::integral_constant<int, 4>{});
  if (a.E <= 256) return go(std::integral_constant<int, 8>{});
  if (a.E <= 512) return go(std::integral_constant<int, 16>{});
  Scratch keys(static_cast<size_t>(a.T * a.E) * sizeof(unsigned));
  a.keys = keys.as<unsigned>();
  go(std::integral_constant<int, 0>{});
}

}  // namespace

void moe_route(const Tensor& logits, int64_t k, bool renormalise, const Tensor& shared_gate,
               Tensor ids, Tensor weights) {
  RouteArgs a = route_args(logits, k, renormalise, shared_gate, ids, weights);
  if (a.T == 0) return;
  with_keys_per_lane(a, [&](auto per) {
    launch_pdl(moe_route_kernel<decltype(per)::value>, blocks_for(a.T * 32, 128), 128, 0, a);
    launched("moe_route_kernel");
  });
}

void group_by_expert(const int32_t* ids, const Grouping& g) {
  launch_pdl(group_by_expert_kernel, 1, kGroupThreads, 2 * g.E * sizeof(int32_t),
             group_args(ids, g));
  launched("group_by_expert_kernel");
}

void route_and_group(const Tensor& logits, int64_t k, bool renormalise, const Tensor& shared_gate,
                     Tensor ids, Tensor weights, const Grouping& g) {
  RouteArgs a = route_args(logits, k, renormalise, shared_gate, ids, weights);
  check(a.T <= kRouteGroupTokens && a.T * a.ldo == g.pairs, ErrorKind::internal,
        "route_and_group: tokens or pairs");
  if (a.T == 0) return;
  const bool one = routes_by_one_warp(a.T, a.ldo);
  with_keys_per_lane(a, [&](auto per) {
    constexpr int kPer = decltype(per)::value;
    GroupArgs ga = group_args(ids.ptr<int32_t>(), g);
    if (one) {
      launch_pdl(route_one_kernel<kPer>, 1, 32, 0, a, ga);
      launched("route_one_kernel");
      return;
    }
    launch_pdl(route_group_kernel<kPer>, 1, kGroupThreads, 2 * g.E * sizeof(int32_t), a, ga);
    launched("route_group_kernel");
  });
}

}  // namespace hibana::cuda
