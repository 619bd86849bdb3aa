// transformers' 32-token greedy continuations (generate(): chunked prefill, recurrent decode)
// must come out of hibana's generator token for token.
#include <gtest/gtest.h>

#include "engine/generator.h"
#include "support/fixture_model.h"

namespace hibana {
namespace {

using Param = std::tuple<std::string, std::string>;  // fixture, device

class GenerateGoldenTest : public testing::TestWithParam<Param> {};

TEST_P(GenerateGoldenTest, GreedyContinuationMatches) {
  const auto& [name, device] = GetParam();
  if (test::unavailable(device)) GTEST_SKIP();
  auto model = test::load_fixture_model(name, device);
  for (const auto& ref : test::load_reference(name)) {
    SCOPED_TRACE("prompt of " + std::to_string(ref.ids.size()) + " tokens");
    StatePool pool = make_pool_for(*model, static_cast<int64_t>(ref.ids.size() + ref.greedy.size() + 1));
    GenerateOptions go;
    go.max_new_tokens = static_cast<int64_t>(ref.greedy.size());
    go.stop_at_eos = false;
    go.prefill_chunk = 64;  // several prefill passes for the longer prompts
    EXPECT_EQ(generate(*model, pool, ref.ids, go), ref.greedy);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GenerateGoldenTest,
                         testing::Combine(testing::ValuesIn(test::fixture_model_names()),
                                          testing::ValuesIn(test::test_devices())),
                         [](const testing::TestParamInfo<Param>& i) {
                           return std::get<0>(i.param) + "_" + std::get<1>(i.param);
                         });

}  // namespace
}  // namespace hibana
