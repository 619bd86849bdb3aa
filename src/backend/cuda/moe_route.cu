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
__device__ __forceinline__ int store_picks(const RouteArgs& a, int64_t t, int lane,
                                           const Picks& p, float gate) {
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

constexpr int kRouteThreads = 128;

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

// One token's grouping from its pairs' experts, lane j's the j-th (-1: none), in one warp: what
// group_pairs would give, without its barriers. The token's pairs go to distinct experts (the
// top-k's picks, and the shared expert past them), so each active expert has one row and one
// tile: a pair's place in the grouped order is the number of pairs with a lower expert (32
// exchanges between the lanes). Of offsets it writes only what the grouped launches read, the
// entries of the active experts and the ones after them (Grouping).
__device__ __forceinline__ void group_one_token(const GroupArgs& g, int e, int lane) {
  const bool valid = e >= 0 && e < g.E;  // (group_pairs skips ids outside [0, E) too)
  const unsigned same = __match_any_sync(~0u, e);  // (every lane calls it)
  assert(!valid || __popc(same) == 1);              // distinct experts
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

// route_and_group for one token (decode at batch 1) whose pairs fit a warp: one CTA, expert x's
// logit in thread x. The softmax is route_token's, bit for bit (its max, and its sum in its
// order: lane l's experts l, l + 32, ... in turn, then the warp's butterfly). The top-k goes
// through candidates: each warp's m = ceil(k / warps) largest keys (repeats allowed, 0 for the
// lanes past E) are warps * m >= k keys, so tau, the k-th largest of them (at least 1: every
// expert's key is), is at most the k-th largest key, and every pick holds a key >= tau. Where k
// to 32 keys reach tau (the usual case, ~k) they are gathered and warp 0 takes the k rounds
// over them (take_pick, one key a lane); else warp 0 routes the token as route_token does:
// ties (equal logits, a NaN row), warps * m > 32 (no tau), or a tau pushed to 1 by warps with
// fewer than m experts. Either way the same picks in the same order with the same weights, as
// every routing kernel gives. Then warp 0 groups the pairs (group_one_token).
// Against the warp that did all of it (route_token, then 17 passes over the offsets: ~3,600
// instructions in series, 13,668 cycles under Nsight Compute on the 80B; docs/benchmarks.md,
// twenty-fourth slice), each thread has a few hundred instructions and little code.
template <int kPer>
__global__ void __launch_bounds__(kOneTokenExperts) route_one_kernel(RouteArgs a, GroupArgs g) {
  __shared__ float s_max[32], s_exp[kOneTokenExperts], s_sum;
  __shared__ unsigned s_top[32], s_n;
  __shared__ uint2 s_cand[32];
  pdl_start();
  const int x = threadIdx.x, lane = x % 32, warp = x / 32, warps = blockDim.x / 32;
  const int E = static_cast<int>(a.E), k = a.k;
  const bool has = x < E;
  if (x == 0) s_n = 0u;
  const float lx = has ? a.logits[x] : -INFINITY;
  const float gate = a.shared_gate && x == 0 ? a.shared_gate[0] : 0.0f;
  const float wmax = warp_max(lx);
  if (lane == 0) s_max[warp] = wmax;
  __syncthreads();
  float mx = -INFINITY;
  for (int i = 0; i < warps; ++i) mx = fmaxf(mx, s_max[i]);  // (max: any order, the same bits)
  const float ex = has ? expf(lx - mx) : 0.0f;
  s_exp[x] = ex;
  __syncthreads();
  if (warp == 0) {
    float sum = 0.0f;
    for (int i = lane; i < E; i += 32) sum = __fadd_rn(sum, s_exp[i]);
    sum = warp_sum(sum);
    if (lane == 0) s_sum = sum;
  }
  __syncthreads();
  const unsigned key = has ? prob_key(ex / s_sum) : 0u;
  const int m = (k + warps - 1) / warps, tops = warps * m;
  unsigned v = key;
  for (int j = 0; j < m; ++j) {
    const unsigned top = __reduce_max_sync(~0u, v);
    const unsigned who = __reduce_min_sync(~0u, v == top ? static_cast<unsigned>(lane) : 32u);
    if (static_cast<unsigned>(lane) == who) v = 0u;
    if (lane == 0 && warp * m + j < 32) s_top[warp * m + j] = top;
  }
  __syncthreads();
  unsigned tau = UINT_MAX;  // (more than 32 tops: no candidates, the rounds over every key)
  if (tops <= 32) {
    const unsigned mine = lane < tops ? s_top[lane] : 0u;
    int rank = 0;  // among the tops, larger first, then by place
    for (int i = 0; i < tops; ++i) {
      const unsigned o = s_top[i];
      rank += o > mine || (o == mine && i < lane);
    }
    tau = max(__reduce_max_sync(~0u, lane < tops && rank == k - 1 ? mine : 0u), 1u);
  }
  const bool cand = key >= tau;  // (tau >= 1: the keys past E are 0)
  const int count = __syncthreads_count(cand);
  int e;
  if (count >= k && count <= 32) {
    if (cand) s_cand[atomicAdd(&s_n, 1u)] = make_uint2(key, static_cast<unsigned>(x));
    __syncthreads();
    if (warp != 0) return;
    const uint2 c = lane < count ? s_cand[lane] : make_uint2(0u, UINT_MAX);
    unsigned ckey = c.x;
    Picks p;
    for (int j = 0; j < k; ++j) {
      if (take_pick(a, 0, lane, j, ckey, c.y, p) == static_cast<int>(c.y)) ckey = 0u;  // taken
    }
    e = store_picks(a, 0, lane, p, gate);
  } else {
    if (warp != 0) return;
    e = route_token<kPer>(a, 0, lane);
  }
  group_one_token(g, e, lane);
}

// Whether route_and_group routes and groups one token in one CTA (route_one_kernel): its pairs
// (k, with a shared expert k + 1) fit a warp, its experts the CTA.
bool routes_one_token(int64_t tokens, int64_t pairs_per_token, int64_t experts) {
  return tokens == 1 && pairs_per_token <= 32 && experts <= kOneTokenExperts;
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
    launch_pdl(moe_route_kernel<decltype(per)::value>, blocks_for(a.T * 32, kRouteThreads),
               kRouteThreads, 0, a);
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
  const bool one = routes_one_token(a.T, a.ldo, a.E);
  with_keys_per_lane(a, [&](auto per) {
    constexpr int kPer = decltype(per)::value;
    GroupArgs ga = group_args(ids.ptr<int32_t>(), g);
    if (one) {
      launch_pdl(route_one_kernel<kPer>, 1, static_cast<unsigned>((a.E + 31) / 32 * 32), 0, a, ga);
      launched("route_one_kernel");
      return;
    }
    launch_pdl(route_group_kernel<kPer>, 1, kGroupThreads, 2 * g.E * sizeof(int32_t), a, ga);
    launched("route_group_kernel");
  });
}

}  // namespace hibana::cuda
