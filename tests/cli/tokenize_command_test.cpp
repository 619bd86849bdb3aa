// `hibana tokenize` and `hibana detokenize`, run as a user would: the built binary, text on
// standard input, the real Qwen3 tokenizer from ../shared/assets.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "support/paths.h"
#include "support/run_command.h"

namespace hibana {
namespace {

using test::run_hibana;

std::string qwen3() {
  return "--model '" + test::shared_assets() + "/qwen3-tokenizer'";
}

TEST(TokenizeCommand, PrintsIds) {
  // "Hello world" is [9707, 1879] in the Qwen2/3 vocabulary ("Hello", "Ġworld").
  auto r = run_hibana("tokenize " + qwen3() + " --json", "Hello world");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "[9707,1879]\n");
  r = run_hibana("tokenize " + qwen3(), "<|im_start|>user\nHello world");
  EXPECT_EQ(r.out, "151644 872 198 9707 1879\n");
  r = run_hibana("tokenize " + qwen3() + " --json --no-special", "<think>x</think>");
  EXPECT_EQ(r.out, "[13708,766,28257,522,26865,29]\n");
  r = run_hibana("tokenize " + qwen3() + " --json", "");
  EXPECT_EQ(r.out, "[]\n");
}

TEST(TokenizeCommand, DetokenizeReadsJsonOrLists) {
  auto r = run_hibana("detokenize " + qwen3(), "[151644, 872, 198, 9707, 1879]");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "<|im_start|>user\nHello world");
  r = run_hibana("detokenize " + qwen3() + " --skip-special", "151644,872 198\n9707 1879\n");
  EXPECT_EQ(r.out, "user\nHello world");
  r = run_hibana("detokenize " + qwen3(), "9707 banana");
  EXPECT_EQ(r.status, 2);  // invalid argument
}

TEST(TokenizeCommand, RoundTrip) {
  const std::string text = "日本語 😀 def f(x):\n    return x  # ok\n";
  const auto ids = run_hibana("tokenize " + qwen3(), text);
  ASSERT_EQ(ids.status, 0);
  EXPECT_EQ(run_hibana("detokenize " + qwen3(), ids.out).out, text);
}

TEST(TokenizeCommand, MissingTokenizerFails) {
  const auto r = run_hibana("tokenize --model /nonexistent/model", "x");
  EXPECT_NE(r.status, 0);
}

}  // namespace
}  // namespace hibana
