// Private to the CUDA MoE files (moe_route.cu: routing and grouping, moe.cu: the grouped expert
// launches): where a routing's (token, slot) pairs go, grouped by expert.
#pragma once

#include <cstdint>

#include "backend/cuda/common.cuh"

namespace hibana::cuda {

// The pairs of a routing grouped by expert, in stream-ordered scratch that lives as long as
// this: offsets [E + 1] (group e is rows[offsets[e] .. offsets[e + 1])), rows [pairs] (pair
// indices t * k + j), the experts that got any pair, ascending (active[0 .. *n_active)), and
// where each active expert's tiles of mm::kTiledTokens rows start in the tiled kernel's list
// (tile_start[0 .. *n_active]). The grouped launches read offsets only at an active expert and
// the entry after it; a one-token routing (route_one_kernel) writes only those.
struct Grouping {
  Grouping(int experts, int64_t pair_count)
      : E(experts),
        pairs(pair_count),
        offsets((experts + 1) * sizeof(int32_t)),
        rows(pair_count * sizeof(int32_t)),
        active((2 * experts + 2) * sizeof(int32_t)) {}
  int32_t* n_active() const { return active.as<int32_t>() + E; }
  int32_t* tile_start() const { return n_active() + 1; }

  int E;
  int64_t pairs;
  Scratch offsets, rows, active;
};

// Groups the pairs of ids ([pairs] expert ids, -1 or any id outside [0, E) skipped) into g.
void group_by_expert(const int32_t* ids, const Grouping& g);

// Most tokens route_and_group takes (one warp each, in one CTA).
constexpr int64_t kRouteGroupTokens = 32;

// moe_route (ops.h) and group_by_expert of its ids in one launch, for at most
// kRouteGroupTokens tokens: the routing's bits, the grouping's result.
void route_and_group(const Tensor& logits, int64_t k, bool renormalise, const Tensor& shared_gate,
                     Tensor ids, Tensor weights, const Grouping& g);

}  // namespace hibana::cuda
