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

}  // namespace
}  // namespace hibana
