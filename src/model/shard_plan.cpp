#include "model/shard_plan.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace hibana {

Range split_evenly(int64_t n, int rank, int ranks, int64_t unit) {
  check(ranks >= 1 && rank >= 0 && rank < ranks && n >= 0, ErrorKind::internal,
        "split_evenly: bad rank");
  unit = std::max<int64_t>(unit, 1);
  const int64_t units = (n + unit - 1) / unit, base = units / ranks, extra = units % ranks;
  const int64_t first = rank * base + std::min<int64_t>(rank, extra);
  const int64_t count = base + (rank < extra ? 1 : 0);
  return {std::min(n, first * unit), std::min(n, (first + count) * unit)};
}

HeadSplit split_heads(int64_t heads, int64_t kv_heads, int rank, int ranks, const char* heads_name,
                      const char* kv_name) {
  const std::string what = "cannot split " + std::to_string(heads) + " " + heads_name +
                           " reading " + std::to_string(kv_heads) + " " + kv_name + " over " +
                           std::to_string(ranks) + " ranks: ";
  check(kv_heads > 0 && heads % kv_heads == 0, ErrorKind::invalid_argument,
        what + "they do not form equal groups");
  const int64_t group = heads / kv_heads;
  HeadSplit s;
  if (kv_heads >= ranks) {
    s.kv_heads = split_evenly(kv_heads, rank, ranks);
    s.heads = {s.kv_heads.begin * group, s.kv_heads.end * group};
    return s;
  }
  check(ranks % kv_heads == 0, ErrorKind::invalid_argument,
        what + "the " + kv_name + " must be at least as many as the ranks, or divide them");
  const int team = static_cast<int>(ranks / kv_heads);
  check(group >= team, ErrorKind::invalid_argument,
        what + std::to_string(team) + " ranks would share each group of " + std::to_string(group));
  const int64_t g = rank / team;
  const Range part = split_evenly(group, rank % team, team);
  s.kv_heads = {g, g + 1};
  s.heads = {g * group + part.begin, g * group + part.end};
  return s;
}

ShardPlan make_shard_plan(const ModelConfig& c, int rank, int ranks, int64_t block,
                          bool expert_parallel) {
  check(ranks >= 1 && rank >= 0 && rank < ranks, ErrorKind::invalid_argument,
        "rank " + std::to_string(rank) + " of " + std::to_string(ranks));
  ShardPlan p;
  p.rank = rank;
  p.ranks = ranks;
  p.block = std::max<int64_t>(block, 1);
  p.attention = split_heads(c.num_heads, c.num_kv_heads, rank, ranks, "query heads", "KV heads");
  if (c.has_deltanet()) {
    p.deltanet = split_heads(c.linear_value_heads, c.linear_key_heads, rank, ranks,
                             "DeltaNet value heads", "key heads");
  }
  // Every rank needs a part of each split dimension: an empty matrix is not worth a special case.
  auto part = [&](int64_t n, const char* what) {
    const Range r = split_evenly(n, rank, ranks, block);
    check(n == 0 || r.size() > 0, ErrorKind::invalid_argument,
          std::string("cannot split ") + what + " (" + std::to_string(n) + ") over " +
              std::to_string(ranks) + " ranks" +
              (block > 1 ? " in blocks of " + std::to_string(block) : std::string()));
    return r;
  };
  const bool dense = std::count(c.ffns.begin(), c.ffns.end(), FfnKind::dense) > 0;
  if (dense) p.mlp = part(c.intermediate_size, "the MLP intermediate size");
  p.experts = {0, c.num_experts};
  p.expert_parallel = expert_parallel;
  if (expert_parallel) {
    const bool moe = std::count(c.ffns.begin(), c.ffns.end(), FfnKind::moe) > 0;
    check(moe && c.num_experts > 0, ErrorKind::invalid_argument,
          "expert parallelism (--ep) needs a model with MoE layers; this one has none");
    check(c.num_experts % ranks == 0, ErrorKind::invalid_argument,
          "cannot split " + std::to_string(c.num_experts) + " experts over " +
              std::to_string(ranks) +
              " ranks: expert parallelism (--ep) needs a number of experts that the ranks "
              "divide");
    const int64_t per = c.num_experts / ranks;
    p.experts = {rank * per, (rank + 1) * per};
    p.expert = {0, c.moe_intermediate_size};  // whole experts
  } else {
    p.expert = part(c.moe_intermediate_size, "the expert intermediate size");
  }
  p.shared_expert = part(c.shared_expert_intermediate_size, "the shared expert intermediate size");
  p.vocab = part(c.vocab_size, "the vocabulary");
  return p;
}

int64_t scale_block(const ModelConfig& c, bool fp8_weights) {
  if (fp8_weights) return kFp8Block;
  return std::max<int64_t>({1, c.fp8_block_rows, c.fp8_block_cols});
}

void check_shardable(const ModelConfig& c, int ranks, bool fp8_weights, bool expert_parallel) {
  for (int r = 0; r < ranks; ++r) {
    make_shard_plan(c, r, ranks, scale_block(c, fp8_weights), expert_parallel);
  }
}

ModelConfig shard_config(const ModelConfig& c, const ShardPlan& plan) {
  ModelConfig s = c;
  s.num_heads = plan.attention.heads.size();
  s.num_kv_heads = plan.attention.kv_heads.size();
  s.linear_value_heads = plan.deltanet.heads.size();
  s.linear_key_heads = plan.deltanet.kv_heads.size();
  s.intermediate_size = plan.mlp.size();
  s.moe_intermediate_size = plan.expert.size();
  s.shared_expert_intermediate_size = plan.shared_expert.size();
  return s;
}

}  // namespace hibana
