// Each tensor-parallel rank keeps exactly its rows and columns of every matrix.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/mapped_file.h"
#include "model/shard_plan.h"
#include "support/fixture_model.h"

namespace hibana {
namespace {

struct Loaded {
  ModelConfig config;
  ModelWeights whole;
};

Loaded load(const std::string& name) {
  const std::string dir = test::fixture_model_dir(name);
  auto ck = std::make_shared<Checkpoint>(dir);
  Loaded l;
  l.config = parse_model_config(ck->config_text(), dir + "/config.json");
  l.whole = load_weights(l.config, ck);
  return l;
}

ModelWeights shard(const Loaded& l, int rank, int ranks) {
  ModelWeights w = l.whole;
  shard_weights(w, l.config, make_shard_plan(l.config, rank, ranks, scale_block(l.config, false)));
  return w;
}

std::string row(const Tensor& t, int64_t r, int64_t begin, int64_t end) {
  const size_t es = dtype_size(t.dtype);
  return std::string(t.row<char>(r) + begin * es, (end - begin) * es);
}

// part's rows are `rows` of whole, in order.
void expect_rows(const Tensor& whole, const Tensor& part, const std::vector<Range>& rows,
                 const std::string& what) {
  int64_t i = 0;
  for (const Range& r : rows) {
    for (int64_t w = r.begin; w < r.end; ++w, ++i) {
      ASSERT_LT(i, part.shape[0]) << what;
      ASSERT_EQ(row(part, i, 0, part.shape[1]), row(whole, w, 0, whole.shape[1]))
          << what << ": row " << i << " should be row " << w;
    }
  }
  EXPECT_EQ(i, part.shape[0]) << what;
}

// part is columns `cols` of whole.
void expect_columns(const Tensor& whole, const Tensor& part, Range cols, const std::string& what) {
  ASSERT_EQ(part.shape[0], whole.shape[0]) << what;
  ASSERT_EQ(part.shape[1], cols.size()) << what;
  for (int64_t r = 0; r < whole.shape[0]; ++r) {
    ASSERT_EQ(row(part, r, 0, cols.size()), row(whole, r, cols.begin, cols.end))
        << what << " row " << r;
  }
}

Range times(Range r, int64_t k) {
  return {r.begin * k, r.end * k};
}

TEST(ShardWeights, AttentionMlpAndVocabulary) {
  const Loaded l = load("qwen3_dense");  // 6 heads of 16, 2 KV heads, 136 columns, 320 tokens
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const ModelWeights w = shard(l, rank, 2);
    const Range heads{3 * rank, 3 * rank + 3}, kv{rank, rank + 1}, cols{68 * rank, 68 * rank + 68};
    const Range vocab{160 * rank, 160 * rank + 160};
    expect_rows(l.whole.embed.w, w.embed.w, {vocab}, "embedding");
    expect_rows(l.whole.lm_head.w, w.lm_head.w, {vocab}, "lm_head");
    for (size_t i = 0; i < w.layers.size(); ++i) {
      const LayerWeights &a = l.whole.layers[i], &b = w.layers[i];
      expect_rows(a.attn.q.w, b.attn.q.w, {times(heads, 16)}, "q_proj");
      expect_rows(a.attn.k.w, b.attn.k.w, {times(kv, 16)}, "k_proj");
      expect_rows(a.attn.v.w, b.attn.v.w, {times(kv, 16)}, "v_proj");
      expect_columns(a.attn.o.w, b.attn.o.w, times(heads, 16), "o_proj");
      expect_rows(a.mlp.gate.w, b.mlp.gate.w, {cols}, "gate_proj");
      expect_rows(a.mlp.up.w, b.mlp.up.w, {cols}, "up_proj");
      expect_columns(a.mlp.down.w, b.mlp.down.w, cols, "down_proj");
      EXPECT_EQ(b.input_norm.data, a.input_norm.data);  // whole on every rank
    }
  }
}

TEST(ShardWeights, TiedEmbeddingStaysOneTensor) {
  const Loaded l = load("qwen3_tied_gqa6");
  const ModelWeights w = shard(l, 1, 2);
  EXPECT_EQ(w.lm_head.w.data, w.embed.w.data);
  expect_rows(l.whole.embed.w, w.embed.w, {{160, 320}}, "embedding");
}

TEST(ShardWeights, ExpertColumns) {
  const Loaded l = load("qwen3_moe");  // 40 columns per expert
  const ModelWeights w = shard(l, 1, 2);
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const MoeWeights &a = l.whole.layers[i].moe, &b = w.layers[i].moe;
    if (a.experts.gate.empty()) continue;
    EXPECT_EQ(b.router.w.data, a.router.w.data);
    for (size_t e = 0; e < a.experts.gate.size(); ++e) {
      expect_rows(a.experts.gate[e].w, b.experts.gate[e].w, {{20, 40}}, "expert gate");
      expect_rows(a.experts.up[e].w, b.experts.up[e].w, {{20, 40}}, "expert up");
      expect_columns(a.experts.down[e].w, b.experts.down[e].w, {20, 40}, "expert down");
    }
  }
}

TEST(ShardWeights, ExpertParallelKeepsTheRanksWholeExpertsOnly) {
  const Loaded l = load("qwen3_next");  // 6 experts of 32 columns, shared expert of 48
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    ModelWeights w = l.whole;
    shard_weights(w, l.config, make_shard_plan(l.config, rank, 2, 1, true));
    int moe_layers = 0;
    for (size_t i = 0; i < w.layers.size(); ++i) {
      const MoeWeights &a = l.whole.layers[i].moe, &b = w.layers[i].moe;
      if (a.experts.gate.empty()) continue;
      ++moe_layers;
      EXPECT_EQ(b.router.w.data, a.router.w.data);
      EXPECT_EQ(b.first_expert, 3 * rank);
      ASSERT_EQ(b.experts.gate.size(), 3u);
      ASSERT_EQ(b.experts.up.size(), 3u);
      ASSERT_EQ(b.experts.down.size(), 3u);
      for (size_t e = 0; e < 3; ++e) {  // the same bytes, not copies
        EXPECT_EQ(b.experts.gate[e].w.data, a.experts.gate[3 * rank + e].w.data);
        EXPECT_EQ(b.experts.up[e].w.data, a.experts.up[3 * rank + e].w.data);
        EXPECT_EQ(b.experts.down[e].w.data, a.experts.down[3 * rank + e].w.data);
        EXPECT_EQ(b.experts.gate[e].rows(), 32);
        EXPECT_EQ(b.experts.down[e].cols(), 32);
      }
      const Range shared{24 * rank, 24 * rank + 24};
      expect_rows(a.shared.gate.w, b.shared.gate.w, {shared}, "shared expert gate");
      expect_columns(a.shared.down.w, b.shared.down.w, shared, "shared expert down");
    }
    EXPECT_GT(moe_layers, 0);
  }
}

TEST(ShardWeights, DeltaNetChannelsOfSeparateProjections) {
  // Qwen3.5 fixture: 2 key heads of 16, 6 value heads of 24. Rank 1: key head 1, value heads
  // 3..5. Conv channels are [q of 2 key heads | k of 2 key heads | v of 6 value heads].
  const Loaded l = load("qwen3_5");
  const ModelWeights w = shard(l, 1, 2);
  const std::vector<Range> channels = {{16, 32}, {48, 64}, {64 + 72, 64 + 144}};
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const DeltaNetWeights &a = l.whole.layers[i].gdn, &b = w.layers[i].gdn;
    if (a.conv.empty()) continue;
    expect_rows(a.qkv.w, b.qkv.w, channels, "in_proj_qkv");
    expect_rows(a.conv, b.conv, channels, "conv1d");
    expect_rows(a.z.w, b.z.w, {{72, 144}}, "in_proj_z");
    expect_rows(a.b.w, b.b.w, {{3, 6}}, "in_proj_b");
    expect_rows(a.A_log, b.A_log, {{3, 6}}, "A_log");
    expect_columns(a.out.w, b.out.w, {72, 144}, "out_proj");
  }
}

TEST(ShardWeights, PackedDeltaNetShareAKeyHead) {
  // Qwen3-Next fixture over 4 ranks: 2 key heads of 16, 4 value heads of 24 (2 per key head),
  // rows packed per key head as [q 16 | k 16 | v 2x24 | z 2x24] (128 rows) and [b 2 | a 2].
  // Rank 1 shares key head 0 with rank 0 and keeps its second value head.
  const Loaded l = load("qwen3_next");
  const ModelWeights w = shard(l, 1, 4);
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const DeltaNetWeights &a = l.whole.layers[i].gdn, &b = w.layers[i].gdn;
    if (a.conv.empty()) continue;
    expect_rows(a.qkvz.w, b.qkvz.w, {{0, 32}, {56, 80}, {104, 128}}, "in_proj_qkvz");
    expect_rows(a.ba.w, b.ba.w, {{1, 2}, {3, 4}}, "in_proj_ba");
    expect_rows(a.conv, b.conv, {{0, 16}, {32, 48}, {64 + 24, 64 + 48}}, "conv1d");
    expect_columns(a.out.w, b.out.w, {24, 48}, "out_proj");
  }
}

TEST(ShardWeights, MtpLayerIsCutLikeTheOthers) {
  // Qwen3.5 fixture: the MTP head's attention and MLP keep the rank's heads and columns; its fc
  // and norms stay whole.
  const Loaded l = load("qwen3_5");
  ASSERT_TRUE(l.whole.mtp.has_value());
  const ShardPlan plan = make_shard_plan(l.config, 1, 2);
  const ModelWeights w = shard(l, 1, 2);
  ASSERT_TRUE(w.mtp.has_value());
  const MtpWeights &a = *l.whole.mtp, &b = *w.mtp;
  const int64_t hd = l.config.head_dim, qh = hd * (l.config.attention_output_gate ? 2 : 1);
  expect_rows(a.layer.attn.q.w, b.layer.attn.q.w, {times(plan.attention.heads, qh)}, "q_proj");
  expect_rows(a.layer.attn.k.w, b.layer.attn.k.w, {times(plan.attention.kv_heads, hd)}, "k_proj");
  expect_rows(a.layer.attn.v.w, b.layer.attn.v.w, {times(plan.attention.kv_heads, hd)}, "v_proj");
  expect_columns(a.layer.attn.o.w, b.layer.attn.o.w, times(plan.attention.heads, hd), "o_proj");
  expect_rows(a.layer.mlp.gate.w, b.layer.mlp.gate.w, {plan.mlp}, "gate_proj");
  expect_columns(a.layer.mlp.down.w, b.layer.mlp.down.w, plan.mlp, "down_proj");
  EXPECT_EQ(b.fc.w.data, a.fc.w.data);
  EXPECT_EQ(b.pre_fc_norm_hidden.data, a.pre_fc_norm_hidden.data);
  EXPECT_EQ(b.layer.state_index, a.layer.state_index);
}

TEST(ShardWeights, Fp8ScalesFollowTheirRowsAndColumns) {
  const Loaded l = load("qwen3_fp8");  // 16 x 16 scale blocks, 96 columns
  const ModelWeights w = shard(l, 1, 2);
  const LayerWeights &a = l.whole.layers[0], &b = w.layers[0];
  ASSERT_FALSE(a.mlp.down.scale.empty());
  expect_rows(a.mlp.gate.w, b.mlp.gate.w, {{48, 96}}, "gate_proj");
  expect_rows(a.mlp.gate.scale, b.mlp.gate.scale, {{3, 6}}, "gate_proj scales");
  expect_columns(a.mlp.down.w, b.mlp.down.w, {48, 96}, "down_proj");
  expect_columns(a.mlp.down.scale, b.mlp.down.scale, {3, 6}, "down_proj scales");
  EXPECT_EQ(b.mlp.down.block_cols, 16);
}

TEST(ShardWeights, ACutInsideAScaleBlockIsRefused) {
  Loaded l = load("qwen3_fp8");
  ShardPlan p = make_shard_plan(l.config, 1, 2, 1);
  p.mlp = {40, 96};  // not on a 16-row block
  EXPECT_THROW(shard_weights(l.whole, l.config, p), Error);
}

}  // namespace
}  // namespace hibana
