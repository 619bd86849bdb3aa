// Which heads, columns and vocabulary rows each tensor-parallel rank gets.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/mapped_file.h"
#include "model/shard_plan.h"
#include "support/fixture_model.h"

namespace hibana {
namespace {

ModelConfig fixture_config(const std::string& name) {
  const std::string path = test::fixture_model_dir(name) + "/config.json";
  return parse_model_config(read_text_file(path), path);
}

std::vector<Range> all_ranks(int ranks, const std::function<Range(int)>& part) {
  std::vector<Range> parts;
  for (int r = 0; r < ranks; ++r) parts.push_back(part(r));
  return parts;
}

// The parts, in rank order, cover [0, n) once each.
void expect_partition(const std::vector<Range>& parts, int64_t n, const std::string& what) {
  int64_t at = 0;
  for (const Range& p : parts) {
    EXPECT_EQ(p.begin, at) << what;
    EXPECT_GT(p.size(), 0) << what;
    at = p.end;
  }
  EXPECT_EQ(at, n) << what;
}

// Each rank's heads read only its own KV heads, in the uniform groups the attention and
// DeltaNet kernels assume (local head i reads local KV head i / (heads / kv_heads)).
void expect_kernel_groups(const HeadSplit& s, int64_t group, const std::string& what) {
  const int64_t local_group = s.heads.size() / s.kv_heads.size();
  ASSERT_EQ(s.heads.size() % s.kv_heads.size(), 0) << what;
  for (int64_t i = 0; i < s.heads.size(); ++i) {
    EXPECT_EQ((s.heads.begin + i) / group, s.kv_heads.begin + i / local_group)
        << what << ": local head " << i;
  }
}

TEST(SplitEvenly, ContiguousPartsDifferingByAtMostOne) {
  EXPECT_EQ(split_evenly(10, 0, 3), (Range{0, 4}));
  EXPECT_EQ(split_evenly(10, 1, 3), (Range{4, 7}));
  EXPECT_EQ(split_evenly(10, 2, 3), (Range{7, 10}));
  EXPECT_EQ(split_evenly(7, 0, 1), (Range{0, 7}));
}

TEST(SplitEvenly, WholeUnitsWithAShortLastOne) {
  EXPECT_EQ(split_evenly(96, 0, 2, 16), (Range{0, 48}));
  EXPECT_EQ(split_evenly(96, 1, 2, 16), (Range{48, 96}));
  EXPECT_EQ(split_evenly(100, 0, 2, 16), (Range{0, 64}));  // 7 units: 4 + 3
  EXPECT_EQ(split_evenly(100, 1, 2, 16), (Range{64, 100}));
  EXPECT_EQ(split_evenly(136, 1, 2, 128), (Range{128, 136}));
}

TEST(SplitHeads, WholeGroupsWhenThereAreEnoughKvHeads) {
  HeadSplit a = split_heads(6, 2, 1, 2, "query heads", "KV heads");
  EXPECT_EQ(a.heads, (Range{3, 6}));
  EXPECT_EQ(a.kv_heads, (Range{1, 2}));
  HeadSplit b = split_heads(3, 3, 0, 2, "query heads", "KV heads");  // uneven: 2 + 1
  EXPECT_EQ(b.heads, (Range{0, 2}));
  EXPECT_EQ(b.kv_heads, (Range{0, 2}));
}

TEST(SplitHeads, TeamsOfRanksShareAKvHead) {
  HeadSplit a = split_heads(5, 1, 1, 2, "query heads", "KV heads");
  EXPECT_EQ(a.heads, (Range{3, 5}));
  EXPECT_EQ(a.kv_heads, (Range{0, 1}));
  HeadSplit b = split_heads(6, 2, 3, 4, "value heads", "key heads");  // teams of 2
  EXPECT_EQ(b.heads, (Range{5, 6}));
  EXPECT_EQ(b.kv_heads, (Range{1, 2}));
}

TEST(SplitHeads, RejectsWhatCannotBeShared) {
  try {
    split_heads(4, 2, 0, 3, "query heads", "KV heads");
    FAIL() << "2 KV heads over 3 ranks";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("KV heads"), std::string::npos) << e.what();
  }
  EXPECT_THROW(split_heads(2, 1, 0, 4, "query heads", "KV heads"), Error);  // 4 ranks, 2 heads
}

TEST(ShardPlan, EveryFixtureSplitsOverTwoRanks) {
  for (const std::string& name : test::fixture_model_names()) {
    SCOPED_TRACE(name);
    const ModelConfig c = fixture_config(name);
    for (int ranks : {2, 4}) {
      try {
        check_shardable(c, ranks, false);
      } catch (const Error& e) {
        EXPECT_NE(ranks, 2) << e.what();  // two ranks must always work on the fixtures
        continue;
      }
      const int64_t block = scale_block(c, false);
      auto plan = [&](int r) { return make_shard_plan(c, r, ranks, block); };
      const std::string at = " over " + std::to_string(ranks);
      expect_partition(all_ranks(ranks, [&](int r) { return plan(r).attention.heads; }),
                       c.num_heads, "query heads" + at);
      expect_partition(all_ranks(ranks, [&](int r) { return plan(r).vocab; }), c.vocab_size,
                       "vocabulary" + at);
      if (c.moe_intermediate_size > 0) {
        expect_partition(all_ranks(ranks, [&](int r) { return plan(r).expert; }),
                         c.moe_intermediate_size, "expert columns" + at);
      }
      if (c.has_deltanet()) {
        expect_partition(all_ranks(ranks, [&](int r) { return plan(r).deltanet.heads; }),
                         c.linear_value_heads, "value heads" + at);
      }
      for (int r = 0; r < ranks; ++r) {
        const ShardPlan p = plan(r);
        expect_kernel_groups(p.attention, c.num_heads / c.num_kv_heads, "attention" + at);
        if (c.has_deltanet()) {
          expect_kernel_groups(p.deltanet, c.linear_value_heads / c.linear_key_heads,
                               "DeltaNet" + at);
        }
        const ModelConfig local = shard_config(c, p);
        EXPECT_EQ(local.num_heads, p.attention.heads.size());
        EXPECT_EQ(local.num_kv_heads, p.attention.kv_heads.size());
        EXPECT_EQ(local.linear_value_heads, p.deltanet.heads.size());
        EXPECT_EQ(local.moe_intermediate_size, p.expert.size());
        EXPECT_EQ(local.hidden_size, c.hidden_size);
        EXPECT_EQ(local.vocab_size, c.vocab_size);
      }
    }
  }
}

TEST(ShardPlan, DenseColumnsOfTheFixtures) {
  const ModelConfig c = fixture_config("qwen3_dense");  // 6 heads, 2 KV heads, 136 columns
  const ShardPlan p = make_shard_plan(c, 1, 2);
  EXPECT_EQ(p.attention.heads, (Range{3, 6}));
  EXPECT_EQ(p.attention.kv_heads, (Range{1, 2}));
  EXPECT_EQ(p.mlp, (Range{68, 136}));
  EXPECT_EQ(p.vocab, (Range{160, 320}));
  EXPECT_THROW(make_shard_plan(c, 0, 3), Error);  // 2 KV heads cannot serve 3 ranks
}

TEST(ShardPlan, SplitsFallOnFp8ScaleBlocks) {
  const ModelConfig fp8 = fixture_config("qwen3_fp8");  // 16 x 16 blocks, 96 columns
  EXPECT_EQ(scale_block(fp8, false), 16);
  EXPECT_EQ(make_shard_plan(fp8, 1, 2, 16).mlp, (Range{48, 96}));
  const ModelConfig dense = fixture_config("qwen3_dense");  // converted at load: 128 blocks
  EXPECT_EQ(scale_block(dense, true), kFp8Block);
  EXPECT_EQ(make_shard_plan(dense, 0, 2, kFp8Block).mlp, (Range{0, 128}));
  EXPECT_EQ(make_shard_plan(dense, 1, 2, kFp8Block).mlp, (Range{128, 136}));
}

// Expert parallelism: each rank a contiguous block of E / N whole experts; the rest of the
// plan as without it.
TEST(ShardPlan, ExpertParallelGivesEachRankABlockOfWholeExperts) {
  const ModelConfig c = fixture_config("qwen3_next");  // 6 experts of 32 columns, shared 48
  for (int rank = 0; rank < 2; ++rank) {
    const ShardPlan ep = make_shard_plan(c, rank, 2, 1, true), tp = make_shard_plan(c, rank, 2);
    EXPECT_TRUE(ep.expert_parallel);
    EXPECT_EQ(ep.experts, (Range{3 * rank, 3 * rank + 3}));
    EXPECT_EQ(ep.expert, (Range{0, 32}));                             // whole experts
    EXPECT_EQ(ep.shared_expert, (Range{24 * rank, 24 * rank + 24}));  // column-split as in TP
    EXPECT_EQ(ep.shared_expert, tp.shared_expert);
    EXPECT_EQ(ep.attention.heads, tp.attention.heads);
    EXPECT_EQ(ep.vocab, tp.vocab);
    EXPECT_FALSE(tp.expert_parallel);
    EXPECT_EQ(tp.experts, (Range{0, 6}));
    EXPECT_EQ(tp.expert, (Range{16 * rank, 16 * rank + 16}));
    const ModelConfig local = shard_config(c, ep);
    EXPECT_EQ(local.moe_intermediate_size, 32);
    EXPECT_EQ(local.num_experts, 6);  // the router scores every expert on every rank
  }
  ModelConfig eight = fixture_config("qwen3_moe");  // 1 KV head: 4 ranks share it
  eight.num_experts = 8;
  expect_partition(
      all_ranks(4, [&](int r) { return make_shard_plan(eight, r, 4, 1, true).experts; }), 8,
      "8 experts over 4 ranks");
  EXPECT_EQ(make_shard_plan(eight, 3, 4, 1, true).experts, (Range{6, 8}));
}

TEST(ShardPlan, ExpertParallelRefusesWhatItCannotSplit) {
  auto message = [](const ModelConfig& c, int ranks) -> std::string {
    try {
      check_shardable(c, ranks, false, true);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
      return e.what();
    }
    return "(accepted)";
  };
  // 5 experts over 2 ranks, 6 over 4 (its heads would allow 4 ranks without --ep).
  EXPECT_NE(message(fixture_config("qwen3_5_moe"), 2).find("cannot split 5 experts over 2 ranks"),
            std::string::npos);
  ModelConfig six = fixture_config("qwen3_moe");
  check_shardable(six, 4, false);  // fine without expert parallelism
  EXPECT_NE(message(six, 4).find("cannot split 6 experts over 4 ranks"), std::string::npos);
  EXPECT_EQ(message(six, 2), "(accepted)");
  EXPECT_NE(message(fixture_config("qwen3_dense"), 2).find("needs a model with MoE layers"),
            std::string::npos);
}

}  // namespace
}  // namespace hibana
