// Tensor parallelism on every golden fixture: the ranks' sharded model must give the greedy
// tokens of the single-rank model (and of transformers), token for token, in both DeltaNet
// modes, and its logits (the MTP head's too) within float rounding of the single-rank ones.
// The same again with expert parallelism on every MoE fixture whose experts the ranks divide.
// Rank 0 drives and checks; the other ranks follow its passes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "engine/generator.h"
#include "io/mapped_file.h"
#include "parallel/mpi_world.h"
#include "support/fixture_model.h"

namespace hibana {
namespace {

// Every prompt as one sequence of `pool` (kept in `states`), all in one batch with logits at
// every position.
std::vector<SequenceInput> prompts_batch(const std::vector<test::ReferencePrompt>& refs,
                                         StatePool& pool,
                                         std::vector<std::unique_ptr<SequenceState>>& states) {
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
  return batch;
}

// Expects every row of `b` to have the argmax of the same row of `a`; returns the largest
// difference of any logit.
float compare_rows(const ForwardOutput& a, const ForwardOutput& b, const char* what) {
  EXPECT_EQ(b.logits.size(), a.logits.size());
  if (b.logits.size() != a.logits.size()) return INFINITY;
  const int64_t V = a.vocab, rows = static_cast<int64_t>(a.logits.size()) / V;
  float worst = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const float *x = a.row(r), *y = b.row(r);
    EXPECT_EQ(std::max_element(y, y + V) - y, std::max_element(x, x + V) - x)
        << what << " row " << r;
    for (int64_t v = 0; v < V; ++v) worst = std::max(worst, std::fabs(x[v] - y[v]));
  }
  return worst;
}

struct Case {
  std::string fixture;
  bool expert_parallel = false;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.fixture << (c.expert_parallel ? " --ep" : "");
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const std::string& name : test::fixture_model_names()) out.push_back({name, false});
  // --ep: the MoE fixtures whose experts the two ranks of `tp_ranks` divide (qwen3_5_moe's 5
  // experts cannot be split; shard_plan_test checks that refusal).
  for (const std::string& name : test::fixture_model_names()) {
    const std::string path = test::fixture_model_dir(name) + "/config.json";
    const ModelConfig c = parse_model_config(read_text_file(path), path);
    if (c.num_experts > 0 && c.num_experts % 2 == 0) out.push_back({name, true});
  }
  return out;
}

class TensorParallelParity : public testing::TestWithParam<Case> {
 protected:
  std::string fixture() const { return GetParam().fixture; }
  // This rank's shard; on the other ranks, runs rank 0's passes and returns null.
  std::unique_ptr<Model> sharded_or_follow() {
    LoadOptions o;
    o.comm = test::world();
    o.expert_parallel = GetParam().expert_parallel;
    auto model = Model::load(test::fixture_model_dir(fixture()), make_backend("cpu"), o);
    EXPECT_EQ(model->ranks(), o.comm->size());
    if (o.expert_parallel) {  // whole experts, a block of them per rank
      EXPECT_TRUE(model->shard_plan()->expert_parallel);
      for (const LayerWeights& l : model->weights().layers) {
        if (l.ffn != FfnKind::moe) continue;
        EXPECT_EQ(static_cast<int64_t>(l.moe.experts.gate.size()) * o.comm->size(),
                  model->config().num_experts);
        EXPECT_EQ(l.moe.experts.gate[0].rows(), model->config().moe_intermediate_size);
      }
    }
    if (model->rank() == 0) return model;
    follow_rank0(*model);
    return nullptr;
  }
};

TEST_P(TensorParallelParity, GreedyTokensMatchTheSingleRankRun) {
  auto sharded = sharded_or_follow();
  if (!sharded) return;
  auto whole = Model::load(test::fixture_model_dir(fixture()), make_backend("cpu"));
  for (const auto& ref : test::load_reference(fixture())) {
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
  auto whole = Model::load(test::fixture_model_dir(fixture()), make_backend("cpu"));
  const auto refs = test::load_reference(fixture());
  ForwardOutput outs[2];
  const Model* models[2] = {whole.get(), sharded.get()};
  for (int m = 0; m < 2; ++m) {
    StatePool pool(models[m]->state_spec(), 64, 16, static_cast<int64_t>(refs.size()));
    std::vector<std::unique_ptr<SequenceState>> states;
    models[m]->forward(prompts_batch(refs, pool, states), pool.views(), ForwardOptions{}, outs[m]);
  }
  const float worst = compare_rows(outs[0], outs[1], "logits");
  const int64_t V = outs[0].vocab, rows = static_cast<int64_t>(outs[0].logits.size()) / V;
  float big = 0.0f;
  for (float l : outs[0].logits) big = std::max(big, std::fabs(l));
  // The row-parallel sums are added in another order than one rank's dot products: the logits
  // differ by float rounding only. A wrong cut would differ by whole units.
  EXPECT_LT(worst, 1e-4f);
  std::printf(
      "%s: %lld rows, largest logit difference to the single-rank run %.3g (largest logit %.3g)\n",
      (fixture() + (GetParam().expert_parallel ? " --ep" : "")).c_str(),
      static_cast<long long>(rows), worst, big);
  RecordProperty("max_logit_difference", std::to_string(worst));
}

// The MTP head (fixtures that have one): every prompt's MTP rows in one ragged pass, fed the
// single-rank model's hidden states so that only the head's shard is compared.
TEST_P(TensorParallelParity, MtpLogitsMatchTheSingleRankRun) {
  std::vector<test::ReferencePrompt> refs;  // the prompts of two tokens or more
  for (auto& ref : test::load_reference(fixture())) {
    if (!ref.mtp_argmax.empty()) refs.push_back(std::move(ref));
  }
  if (refs.empty()) GTEST_SKIP() << "no MTP head";  // on every rank alike
  auto sharded = sharded_or_follow();
  if (!sharded) return;
  ASSERT_TRUE(sharded->has_mtp());
  auto whole = Model::load(test::fixture_model_dir(fixture()), make_backend("cpu"));
  const int64_t H = whole->config().hidden_size;
  ForwardOutput outs[2];
  const Model* models[2] = {whole.get(), sharded.get()};
  std::vector<std::vector<int32_t>> next;
  std::vector<std::vector<float>> hidden;
  for (int m = 0; m < 2; ++m) {
    StatePool pool(models[m]->state_spec(), 64, 16, static_cast<int64_t>(refs.size()));
    std::vector<std::unique_ptr<SequenceState>> states;
    const std::vector<SequenceInput> batch = prompts_batch(refs, pool, states);
    ForwardOptions fo;
    fo.want_hidden = true;
    ForwardOutput main;
    models[m]->forward(batch, pool.views(), fo, main);
    std::vector<MtpInput> mtp(refs.size());
    for (size_t i = 0; i < refs.size(); ++i) {
      // MTP row p pairs the target's final hidden state at p with token p + 1.
      const int64_t n = static_cast<int64_t>(refs[i].ids.size()), row = main.first_row[i];
      if (m == 0) {
        next.emplace_back(refs[i].ids.begin() + 1, refs[i].ids.end());
        hidden.emplace_back(main.hidden_states.begin() + row * H,
                            main.hidden_states.begin() + (row + n - 1) * H);
      }
      mtp[i].next_tokens = next[i];
      mtp[i].hidden = hidden[i];
      mtp[i].pages = states[i]->pages();
      mtp[i].logits = LogitsMode::all;
    }
    models[m]->forward_mtp(mtp, pool.views(), outs[m]);
  }
  const float worst = compare_rows(outs[0], outs[1], "MTP");
  const int64_t V = outs[0].vocab, rows = static_cast<int64_t>(outs[0].logits.size()) / V;
  for (size_t i = 0; i < refs.size(); ++i) {  // the single-rank rows match the reference
    for (int64_t p = 0; p < outs[0].row_count[i]; ++p) {
      const float* a = outs[0].row(outs[0].first_row[i] + p);
      EXPECT_EQ(std::max_element(a, a + V) - a, refs[i].mtp_argmax[p])
          << "prompt " << i << ", MTP row " << p;
    }
  }
  EXPECT_LT(worst, 1e-4f);
  std::printf("%s: %lld MTP rows, largest MTP logit difference to the single-rank run %.3g\n",
              (fixture() + (GetParam().expert_parallel ? " --ep" : "")).c_str(),
              static_cast<long long>(rows), worst);
  RecordProperty("max_mtp_logit_difference", std::to_string(worst));
}

TEST(ExpertParallelParity, CoversTheMoeFixtures) {
  std::vector<std::string> ep;
  for (const Case& c : cases()) {
    if (c.expert_parallel) ep.push_back(c.fixture);
  }
  EXPECT_EQ(ep, (std::vector<std::string>{"qwen3_moe", "qwen3_next"}));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelParity, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<Case>& i) {
                           return i.param.fixture + (i.param.expert_parallel ? "_ep" : "");
                         });

}  // namespace
}  // namespace hibana
