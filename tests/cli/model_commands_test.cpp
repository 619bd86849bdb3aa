// `hibana run`, `eval` and `info` on the committed fixture checkpoints, run as a user would,
// in the exact forms other checks depend on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/mapped_file.h"
#include "support/run_command.h"

namespace hibana {
namespace {

using testing::HasSubstr;

std::string fixture(const std::string& name) { return test::fixtures_dir() + "/models/" + name; }

nlohmann::json reference(const std::string& name, size_t prompt) {
  return nlohmann::json::parse(read_text_file(fixture(name) + "/reference.json"))["prompts"][prompt];
}

std::string join(const std::vector<int32_t>& ids, const char* sep) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? sep : "") + std::to_string(ids[i]);
  return s;
}

TEST(RunCommand, PrintIdsStreamsTheGreedyContinuation) {
  auto ref = reference("qwen3_dense", 3);  // 65 tokens
  auto ids = ref["ids"].get<std::vector<int32_t>>();
  auto greedy = ref["greedy"].get<std::vector<int32_t>>();
  auto r = test::run_hibana("run --model '" + fixture("qwen3_dense") + "' --prompt-ids " +
                            join(ids, ",") + " -n " + std::to_string(greedy.size()) +
                            " --print-ids --ignore-eos");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, join(greedy, " ") + "\n");
}

TEST(RunCommand, SamplingIsDeterministicForASeed) {
  const std::string args = "run --model '" + fixture("qwen3_next") +
                           "' --prompt-ids 5,6,7 -n 12 --print-ids --temperature 0.9 --top-p 0.95 "
                           "--ignore-eos --seed ";
  auto a = test::run_hibana(args + "3"), b = test::run_hibana(args + "3"), c = test::run_hibana(args + "4");
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
}

TEST(EvalCommand, JsonHasArgmaxAndLastLogits) {
  auto ref = reference("qwen3_moe", 1);  // 63 tokens
  auto ids = ref["ids"].get<std::vector<int32_t>>();
  auto r = test::run_hibana("eval --model '" + fixture("qwen3_moe") + "' --prompt-ids " +
                            join(ids, ",") + " --json");
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["argmax"], ref["argmax"]);
  auto logits = j["last_logits"].get<std::vector<float>>();
  auto want = ref["last_logits"].get<std::vector<float>>();
  ASSERT_EQ(logits.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(logits[i], want[i], 1e-4) << i;
}

TEST(InfoCommand, DescribesTheModel) {
  auto r = test::run_hibana("info --model '" + fixture("qwen3_next") + "'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("architecture: qwen3_next"));
  EXPECT_THAT(r.out, HasSubstr("3 gated deltanet"));
  EXPECT_THAT(r.out, HasSubstr("+ 1 MTP layer"));
  EXPECT_THAT(r.out, HasSubstr("parameters: "));
  EXPECT_THAT(r.out, HasSubstr("bytes per weight"));
  EXPECT_THAT(r.out, HasSubstr("bytes read per decoded token"));
}

TEST(DummyWeights, AnyConfigRunsWithRandomWeights) {
  for (const char* dtype : {"bf16", "fp8", "f32"}) {
    auto r = test::run_hibana("run --load-format dummy --config '" + fixture("qwen3_5_moe") +
                              "/config.json' --dtype " + dtype + " --prompt-ids 1,2,3 -n 4 --print-ids --ignore-eos");
    ASSERT_EQ(r.status, 0) << dtype << ": " << r.err;
    std::istringstream in(r.out);
    int count = 0, id;
    while (in >> id) ++count;
    EXPECT_EQ(count, 4) << r.out;
  }
}

// `bench prefill --chunk N` takes the prompt in passes of N tokens, as the server's steps do,
// and says so; a negative chunk is refused.
TEST(BenchCommand, PrefillInPassesOfAChunk) {
  const std::string args = "bench prefill --device cpu --load-format dummy --config '" +
                           fixture("qwen3_5_moe") + "/config.json' --prompt-tokens 96";
  auto r = test::run_hibana(args + " --chunk 64");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("prefill 96 tokens in passes of 64: "));
  r = test::run_hibana(args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("prefill 96 tokens: "));
  r = test::run_hibana(args + " --chunk -1");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--chunk"));
}

// `bench decode --summary-k K --temperature T` times the steps as sampled requests' summaries
// make them (their k largest entries, their sums) and says so; a k the summaries cannot hold is
// refused.
TEST(BenchCommand, DecodeWithSampledRequestsSummaries) {
  const std::string args = "bench decode --device cpu --load-format dummy --config '" +
                           fixture("qwen3_5_moe") + "/config.json' --context 16 --steps 2";
  auto r = test::run_hibana(args + " --summary-k 20 --temperature 0.7");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out,
              HasSubstr("each row's summary: its 20 largest entries, sums at temperature 0.7"));
  EXPECT_THAT(r.out, HasSubstr("tokens/s"));
  r = test::run_hibana(args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, testing::Not(HasSubstr("each row's summary")));
  r = test::run_hibana(args + " --summary-k 257");
  EXPECT_NE(r.status, 0);  // (CLI11's range check, as for the other ranged options)
  EXPECT_THAT(r.err, HasSubstr("--summary-k"));
}

TEST(Errors, BadInputGivesAClearErrorAndExitCode) {
  auto r = test::run_hibana("run --model /nonexistent/model --prompt-ids 1,2");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.err, HasSubstr("error: "));
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/model"));
  r = test::run_hibana("run --model '" + fixture("qwen3_dense") + "' --prompt-ids 1,x,3");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("'x' is not a token id"));
  r = test::run_hibana("run --model '" + fixture("qwen3_dense") + "' --prompt-ids 1,99999");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("outside the vocabulary"));
  r = test::run_hibana("run --load-format dummy --prompt-ids 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--config"));
  r = test::run_hibana("run --model '" + fixture("qwen3_dense") + "' --prompt-ids 1 --temperature -1");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("temperature"));
}

}  // namespace
}  // namespace hibana
