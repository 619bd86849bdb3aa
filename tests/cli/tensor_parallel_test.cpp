// `hibana run --tp N` as a user runs it: the command starts N ranks itself (mpirun), and the
// greedy tokens are the single-rank run's. `serve --tp` is served in
// tests/server/serve_tensor_parallel_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/mapped_file.h"
#include "parallel/communicator.h"
#include "support/run_command.h"

namespace hibana {
namespace {

using testing::HasSubstr;

std::string fixture(const std::string& name) {
  return test::fixtures_dir() + "/models/" + name;
}

std::string prompt_ids(const std::string& name, size_t prompt) {
  auto ids = nlohmann::json::parse(
                 read_text_file(fixture(name) + "/reference.json"))["prompts"][prompt]["ids"]
                 .get<std::vector<int32_t>>();
  std::string s;
  for (int32_t id : ids) {
    if (!s.empty()) s += ',';
    s += std::to_string(id);
  }
  return s;
}

std::string run_args(const std::string& name, size_t prompt) {
  return "run --model '" + fixture(name) + "' --prompt-ids " + prompt_ids(name, prompt) +
         " -n 24 --print-ids --ignore-eos";
}

class RunTensorParallel : public testing::Test {
 protected:
  void SetUp() override {
    if (!mpi_available()) GTEST_SKIP() << "built without MPI";
  }
};

TEST_F(RunTensorParallel, TwoRanksGiveTheSingleRankTokens) {
  // A hybrid model with packed DeltaNet projections and 5 query heads (3 + 2 per rank), and a
  // Qwen3.5 MoE whose 3 KV heads split 2 + 1.
  for (const char* name : {"qwen3_next", "qwen3_5_moe"}) {
    SCOPED_TRACE(name);
    auto single = test::run_hibana(run_args(name, 4));  // 150 tokens: three prefill chunks
    auto ranks = test::run_hibana(run_args(name, 4) + " --tp 2");
    ASSERT_EQ(single.status, 0) << single.err;
    ASSERT_EQ(ranks.status, 0) << ranks.err;
    EXPECT_EQ(ranks.out, single.out);
  }
}

TEST_F(RunTensorParallel, FourRanksShareKeyHeads) {
  // Qwen3-Next over 4 ranks: pairs of ranks share each DeltaNet key head and the one KV head.
  auto single = test::run_hibana(run_args("qwen3_next", 2));
  auto ranks = test::run_hibana(run_args("qwen3_next", 2) + " --tp 4");
  ASSERT_EQ(ranks.status, 0) << ranks.err;
  EXPECT_EQ(ranks.out, single.out);
}

TEST_F(RunTensorParallel, AModelThatCannotBeSplitFailsBeforeAnyRankStarts) {
  auto r = test::run_hibana(run_args("qwen3_dense", 0) + " --tp 3");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("2 KV heads over 3 ranks"));
  EXPECT_EQ(r.out, "");
}

// --ep: each rank holds whole experts. Qwen3-MoE's 6 experts: 3 per rank, its dense layer
// column-split as without --ep.
TEST_F(RunTensorParallel, ExpertParallelGivesTheSingleRankTokens) {
  auto single = test::run_hibana(run_args("qwen3_moe", 4));
  auto ranks = test::run_hibana(run_args("qwen3_moe", 4) + " --tp 2 --ep");
  ASSERT_EQ(single.status, 0) << single.err;
  ASSERT_EQ(ranks.status, 0) << ranks.err;
  EXPECT_EQ(ranks.out, single.out);
}

TEST_F(RunTensorParallel, ExpertParallelRefusalsComeBeforeAnyRankStarts) {
  struct Refusal {
    std::string args, says;
  };
  for (const Refusal& r : std::vector<Refusal>{
           {run_args("qwen3_5_moe", 0) + " --tp 2 --ep",
            "error: cannot split 5 experts over 2 ranks"},
           {run_args("qwen3_dense", 0) + " --tp 2 --ep",
            "error: expert parallelism (--ep) needs a model with MoE layers"},
           {run_args("qwen3_moe", 0) + " --ep", "error: --ep needs --tp N with N >= 2"}}) {
    SCOPED_TRACE(r.args);
    auto out = test::run_hibana(r.args);
    EXPECT_EQ(out.status, 2);
    EXPECT_THAT(out.err, HasSubstr(r.says));
    EXPECT_THAT(out.err, testing::Not(HasSubstr("error (rank")));  // by the launcher, once
    EXPECT_EQ(out.out, "");
  }
}

TEST_F(RunTensorParallel, AnErrorOnRankZeroEndsEveryRank) {
  auto r = test::run_hibana("run --model '" + fixture("qwen3_dense") +
                            "' --prompt-ids 1,2,999 -n 4 --print-ids --tp 2");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("token id 999 is outside the vocabulary"));
}

// --device cuda: one GPU per rank over NCCL; a build or machine that cannot says why before any
// rank starts.
TEST_F(RunTensorParallel, CudaRanksSayWhatIsMissing) {
  if (nccl_available() && visible_gpus() >= 2) GTEST_SKIP() << "this machine can run GPU ranks";
  auto r = test::run_hibana(run_args("qwen3_dense", 0) + " --tp 2 --device cuda");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.err, HasSubstr(nccl_available() ? "needs 2 GPUs; this process sees"
                                                : "needs the NCCL communicator"));
  EXPECT_EQ(r.out, "");
}

}  // namespace
}  // namespace hibana
