// Replays what the tokenizer fuzzers saved (tests/fuzz/seeds/ and tests/fuzz/corpus/, grown by
// scripts/fuzz) through the fuzz targets' own checks, so every input a fuzzer ever found
// interesting stays a regression test of the normal build.
#include <gtest/gtest.h>

#include "fuzz/checks/bpe_encode.h"
#include "fuzz/checks/detokenize.h"
#include "fuzz/checks/jinja.h"
#include "fuzz/checks/replay.h"
#include "fuzz/checks/tool_call.h"

namespace hibana::fuzz {
namespace {

TEST(FuzzCorpus, BpeEncode) {
  const TokenizerFixture& fx = qwen3_fixture();
  replay_saved_inputs("bpe_encode_fuzz", [&](std::string_view in) { check_bpe_encode(fx, in); });
}

TEST(FuzzCorpus, Detokenize) {
  const TokenizerFixture& fx = qwen3_fixture();
  replay_saved_inputs("detokenize_fuzz", [&](std::string_view in) { check_detokenize(fx, in); });
}

TEST(FuzzCorpus, Jinja) {
  replay_saved_inputs("jinja_fuzz", check_jinja);
}

TEST(FuzzCorpus, ToolCallJson) {
  replay_saved_inputs("tool_call_json_fuzz",
                      [](std::string_view in) { check_tool_calls(in, ToolCallForm::json); });
}

TEST(FuzzCorpus, ToolCallXml) {
  replay_saved_inputs("tool_call_xml_fuzz",
                      [](std::string_view in) { check_tool_calls(in, ToolCallForm::xml); });
}

}  // namespace
}  // namespace hibana::fuzz
