// `hibana tokenize` and `hibana detokenize`, run as a user would: the built binary, text on
// standard input, the real Qwen3 tokenizer from ../shared/assets.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/paths.h"

namespace hibana {
namespace {

struct Result {
  int status;
  std::string out;
};

// Runs `hibana ARGS < input` through the shell and returns its exit status and stdout.
Result run_hibana(const std::string& args, const std::string& input) {
  const auto input_path = std::filesystem::temp_directory_path() /
                          ("hibana_tokenize_test_" + std::to_string(::getpid()) + ".in");
  {
    std::ofstream f(input_path, std::ios::binary);
    f << input;
  }
  const std::string command =
      "'" + test::hibana_binary() + "' " + args + " < '" + input_path.string() + "' 2>/dev/null";
  Result r{-1, ""};
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return r;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) r.out.append(buffer, n);
  const int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::filesystem::remove(input_path);
  return r;
}

std::string qwen3() {
  return "--model '" + test::shared_assets() + "/qwen3-tokenizer'";
}

TEST(TokenizeCommand, PrintsIds) {
  // "Hello world" is [9707, 1879] in the Qwen2/3 vocabulary ("Hello", "Ġworld").
  Result r = run_hibana("tokenize " + qwen3() + " --json", "Hello world");
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
  Result r = run_hibana("detokenize " + qwen3(), "[151644, 872, 198, 9707, 1879]");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "<|im_start|>user\nHello world");
  r = run_hibana("detokenize " + qwen3() + " --skip-special", "151644,872 198\n9707 1879\n");
  EXPECT_EQ(r.out, "user\nHello world");
  r = run_hibana("detokenize " + qwen3(), "9707 banana");
  EXPECT_EQ(r.status, 2);  // invalid argument
}

TEST(TokenizeCommand, RoundTrip) {
  const std::string text = "日本語 😀 def f(x):\n    return x  # ok\n";
  const Result ids = run_hibana("tokenize " + qwen3(), text);
  ASSERT_EQ(ids.status, 0);
  EXPECT_EQ(run_hibana("detokenize " + qwen3(), ids.out).out, text);
}

TEST(TokenizeCommand, MissingTokenizerFails) {
  const Result r = run_hibana("tokenize --model /nonexistent/model", "x");
  EXPECT_NE(r.status, 0);
}

}  // namespace
}  // namespace hibana
