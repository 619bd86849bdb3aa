// MoE routing on CUDA: each token's softmax over its router logits and top-k (one warp per
// token), the grouping of the (token, slot) pairs by expert that the grouped expert launches
// read, and both in one launch for a decode batch.
#include <climits>
#include <cmath>
#include <type_traits>

#include "backend/cuda/matmul_impl.h"
#include "backend/cuda/moe_impl.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/route_impl.cuh"

namespace hibana::cuda {

namespace {

constexpr int kRouteThreads = 128;

template <int kPer>
__global__ void moe_route_kernel(RouteArgs a) {
  pdl_start();
  const int64_t t = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (t < a.T) route_token<kPer>(a, t, threadIdx.x % 32);
}

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

// route_and_group for one token (decode at batch 1) whose pairs fit a warp: one CTA, expert x's
// logit in thread x (route_one_token).
template <int kPer>
__global__ void __launch_bounds__(kOneTokenExperts) route_one_kernel(RouteArgs a, GroupArgs g) {
  __shared__ RouteOneSmem s;
  pdl_start();
  route_one_token<kPer, 1>(a, g, s);
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

bool router_route_and_group(const Tensor& x, const Weight& router, Tensor scores,
                            const Tensor& logits, int64_t k, bool renormalise,
                            const Tensor& shared_gate, Tensor ids, Tensor weights,
                            const Grouping& g) {
  const RouteArgs a = route_args(logits, k, renormalise, shared_gate, ids, weights);
  check(a.T == 1 && a.ldo == g.pairs, ErrorKind::internal, "router_route_and_group: one token");
  return mm::run_routed(x, router, scores, a, group_args(ids.ptr<int32_t>(), g));
}

}  // namespace hibana::cuda
