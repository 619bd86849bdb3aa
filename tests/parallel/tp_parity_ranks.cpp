// Tensor parallelism on every golden fixture: the ranks' sharded model must give the greedy
// tokens of the single-rank model (and of transformers), token for token, in both DeltaNet
// modes, and its logits within float rounding of the single-rank ones. Rank 0 drives and
// checks; the other ranks follow its passes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/generator.h"
#include "parallel/mpi_world.h"
#include "support/fixture_model.h"

namespace hibana {
namespace {

class TensorParallelParity : public testing::TestWithParam<std::string> {
 protected:
  // This rank's shard; on the other ranks, runs rank 0's passes and returns null.
  std::unique_ptr<Model> sharded_or_follow() {
    LoadOptions o;
    o.comm = test::world();
    auto model = Model::load(test::fixture_model_dir(GetParam()), make_backend("cpu"), o);
    EXPECT_EQ(model->ranks(), o.comm->size());
    if (model->rank() == 0) return model;
    follow_rank0(*model);
    return nullptr;
  }
};

TEST_P(TensorParallelParity, GreedyTokensMatchTheSingleRankRun) {
  auto sharded = sharded_or_follow();
  if (!sharded) return;
  auto whole = Model::load(test::fixture_model_dir(GetParam()), make_backend("cpu"));
  for (const auto& ref : test::load_reference(GetParam())) {
    for (GdnMode mode : {GdnMode::aligned_chunks, GdnMode::recurrent}) {
      SCOPED_TRACE("prompt of " + std::to_string(ref.ids.size()) + " tokens, " +
                   (mode == GdnMode::recurrent ? "recurrent" : "chunked"));
      const int64_t positions = static_cast<int64_t>(ref.ids.size() + ref.greedy.size() + 1);
      GenerateOptions go;
      go.max_new_tokens = static_cast<int64_t>(ref.greedy.size());
      go.stop_at_eos = false;
      go.prefill_chunk = 64;  // several prefill passes for the longer prompts
      go.gdn_mode = mode;
      StatePool whole_pool = make_pool_for(*whole, positions);
      StatePool shard_pool = make_pool_for(*sharded, positions);
      const std::vector<int32_t> single = generate(*whole, whole_pool, ref.ids, go);
      EXPECT_EQ(generate(*sharded, shard_pool, ref.ids, go), single);
      EXPECT_EQ(single, ref.greedy);
    }
  }
}

// Every prompt in one ragged pass with logits at every position.
TEST_P(TensorParallelParity, BatchedLogitsMatchTheSingleRankRun) {
  auto sharded = sharded_or_follow();
  if (!sharded) return;
  auto whole = Model::load(test::fixture_model_dir(GetParam()), make_backend("cpu"));
  const auto refs = test::load_reference(GetParam());
  ForwardOutput outs[2];
  const Model* models[2] = {whole.get(), sharded.get()};
  for (int m = 0; m < 2; ++m) {
    StatePool pool(models[m]->state_spec(), 64, 16, static_cast<int64_t>(refs.size()));
    std::vector<std::unique_ptr<SequenceState>> states;
    std::vector<SequenceInput> batch;
    for (const auto& ref : refs) {
      states.push_back(std::make_unique<SequenceState>(pool));
      states.back()->reserve(static_cast<int64_t>(ref.ids.size()));
      SequenceInput in;
      in.tokens = ref.ids;
      in.pages = states.back()->pages();
      in.slot = states.back()->slot();
      in.logits = LogitsMode::all;
      batch.push_back(in);
    }
    models[m]->forward(batch, pool.views(), ForwardOptions{}, outs[m]);
  }
  ASSERT_EQ(outs[1].logits.size(), outs[0].logits.size());
  const int64_t V = outs[0].vocab, rows = static_cast<int64_t>(outs[0].logits.size()) / V;
  float worst = 0.0f, big = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const float *a = outs[0].row(r), *b = outs[1].row(r);
    EXPECT_EQ(std::max_element(b, b + V) - b, std::max_element(a, a + V) - a) << "row " << r;
    for (int64_t v = 0; v < V; ++v) worst = std::max(worst, std::fabs(a[v] - b[v]));
    for (int64_t v = 0; v < V; ++v) big = std::max(big, std::fabs(a[v]));
  }
  // The row-parallel sums are added in another order than one rank's dot products: the logits
  // differ by float rounding only. A wrong cut would differ by whole units.
  EXPECT_LT(worst, 1e-4f);
  std::printf(
      "%s: %lld rows, largest logit difference to the single-rank run %.3g (largest logit %.3g)\n",
      GetParam().c_str(), static_cast<long long>(rows), worst, big);
  RecordProperty("max_logit_difference", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelParity,
                         testing::ValuesIn(test::fixture_model_names()),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace hibana
