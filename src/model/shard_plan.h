// Tensor parallelism: which part of the model each of N ranks holds and computes.
//
// Column-parallel matrices (q/k/v, gate/up, DeltaNet in-projections, each expert's gate/up) keep
// the output rows of the rank's heads or intermediate columns; row-parallel ones (o_proj, down,
// DeltaNet out_proj) keep the matching input columns, and their outputs are summed over the
// ranks. The embedding and the lm_head are split by vocabulary. Norms, routers and the
// shared-expert gate are whole on every rank.
//
// Expert parallelism (an option of the plan): each rank holds a contiguous block of E / ranks
// whole routed experts instead of a slice of every expert's columns; the router stays whole, so
// every rank routes every token, computes the (token, slot) pairs of its own experts and adds
// zero for the others, and the FFN's sum over the ranks joins them. The shared expert and
// everything else are split as without it.
#pragma once

#include <cstdint>

#include "model/config.h"
#include "model/weights.h"

namespace hibana {

struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Range&) const = default;
};

// The part of rank `rank` when n items are split over `ranks` in contiguous runs of whole
// units of `unit` items (the last unit may be short): unit counts differ by at most one, the
// lower ranks taking the extra ones.
Range split_evenly(int64_t n, int rank, int ranks, int64_t unit = 1);

// Heads that read shared heads: attention query heads and the KV heads of their groups, or
// DeltaNet value heads and their key heads.
struct HeadSplit {
  Range heads;
  Range kv_heads;
};
// With at least as many KV heads as ranks, each rank owns whole groups (its KV heads and every
// query head that reads them). With fewer, the ranks must come in equal teams per KV head: a
// team splits its group's query heads and each member keeps a copy of the KV head. Anything
// else throws Error(invalid_argument) naming the heads ("query heads", "KV heads").
HeadSplit split_heads(int64_t heads, int64_t kv_heads, int rank, int ranks, const char* heads_name,
                      const char* kv_name);

struct ShardPlan {
  int rank = 0, ranks = 1;
  int64_t block = 1;    // intermediate and vocabulary splits fall on multiples of this
  HeadSplit attention;  // query heads / KV heads
  HeadSplit deltanet;   // value heads / key heads (empty without DeltaNet layers)
  Range mlp;            // dense MLP intermediate columns
  Range expert;         // intermediate columns of every routed expert (all with expert_parallel)
  Range experts;        // the routed experts this rank holds (a block with expert_parallel)
  bool expert_parallel = false;
  Range shared_expert;  // intermediate columns of the shared expert
  Range vocab;          // embedding and lm_head rows
};

// `block` is the fp8 scale block of the weights (0 or 1: none): intermediate and vocabulary
// splits fall on its multiples, so no scale block is cut. Throws Error(invalid_argument) when
// the model cannot be split over `ranks`, naming the shape at fault; with `expert_parallel`,
// also when the model has no MoE layer or its number of experts is not a multiple of `ranks`.
ShardPlan make_shard_plan(const ModelConfig& c, int rank, int ranks, int64_t block = 1,
                          bool expert_parallel = false);

// The scale block a split must respect: kFp8Block when matrices are converted to fp8 at load
// (`fp8_weights`), the checkpoint's own fp8 block otherwise (1 when it has none).
int64_t scale_block(const ModelConfig& c, bool fp8_weights);
// Throws what make_shard_plan would for some rank: checked before any rank is started.
void check_shardable(const ModelConfig& c, int ranks, bool fp8_weights,
                     bool expert_parallel = false);

// The shapes one rank's layers compute with: its heads and intermediate sizes (the vocabulary
// and everything else as in `c`).
ModelConfig shard_config(const ModelConfig& c, const ShardPlan& plan);

// Replaces every tensor of `w` (whole-model weights, on the host) by the rank's part: views of
// rows where they are contiguous (a memory-mapped checkpoint then reads only those bytes),
// copies otherwise. The MTP head's decoder layer is cut like the others (its fc and norms stay
// whole). With expert parallelism the rank's MoE layers keep only its block of experts
// (MoeWeights::first_expert says which). Throws Error(unsupported) when a cut would fall inside
// an fp8 scale block.
void shard_weights(ModelWeights& w, const ModelConfig& c, const ShardPlan& plan);

}  // namespace hibana
