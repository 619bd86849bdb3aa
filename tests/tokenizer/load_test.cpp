// Which files Tokenizer::load reads, the chat template it finds, and the errors it gives for
// files it cannot use (each naming the file and the problem).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "qwen_tokenizers.h"
#include "tiny_tokenizer.h"

namespace hibana {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Runs load(path) and returns the Error it throws (fails the test if it does not throw).
Error load_error(const std::string& path) {
  try {
    Tokenizer::load(path);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "loading " << path << " did not fail";
  return Error(ErrorKind::internal, "");
}

void expect_error(const std::string& path, ErrorKind kind, const std::vector<std::string>& words) {
  const Error e = load_error(path);
  EXPECT_EQ(e.kind(), kind) << e.what();
  for (const std::string& w : words) {
    EXPECT_NE(std::string(e.what()).find(w), std::string::npos)
        << "'" << w << "' not in: " << e.what();
  }
}

TEST(LoadErrors, MissingPathAndEmptyDirectory) {
  expect_error("/nonexistent/tokenizer/dir", ErrorKind::not_found, {"/nonexistent/tokenizer/dir"});
  test::TempDir dir;
  expect_error(dir.path().string(), ErrorKind::not_found, {"tokenizer.json", "vocab.json"});
}

TEST(LoadErrors, VocabWithoutMerges) {
  test::TempDir dir;
  dir.write("vocab.json", R"({"a": 0})");
  expect_error(dir.path().string(), ErrorKind::not_found, {"merges.txt"});
  test::TempDir other;
  other.write("merges.txt", "a b\n");
  expect_error(other.path().string(), ErrorKind::not_found, {"vocab.json"});
}

TEST(LoadErrors, MalformedJson) {
  test::TempDir dir;
  const std::string path = dir.write("tokenizer.json", R"({"model": {"vocab": {"a": 0}, )");
  expect_error(path, ErrorKind::corrupt_data, {path, "malformed JSON"});
  test::TempDir other;  // without tokenizer.json, which load() would prefer
  const std::string vocab = other.write("vocab.json", "[1, 2");
  other.write("merges.txt", "");
  expect_error(other.path().string(), ErrorKind::corrupt_data, {vocab, "malformed JSON"});
}

TEST(LoadErrors, WrongShapes) {
  test::TempDir dir;
  const std::string path = dir.write("tokenizer.json", R"({"version": "1.0"})");
  expect_error(path, ErrorKind::corrupt_data, {path, "model"});
  dir.write("tokenizer.json",
            R"({"model": {"type": "BPE", "vocab": {"a": "zero"}, "merges": []}})");
  expect_error(path, ErrorKind::corrupt_data, {path, "'a'", "not an integer"});
  dir.write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {}, "merges": []}})");
  expect_error(path, ErrorKind::corrupt_data, {path, "no vocabulary"});
}

TEST(LoadErrors, MergesReferencingUnknownTokens) {
  test::TempDir dir;
  json j = test::tiny_tokenizer_json({}, {});
  j["model"]["merges"] = json::array({json::array({"a", "zz"})});
  const std::string path = dir.write("tokenizer.json", j.dump());
  expect_error(path, ErrorKind::corrupt_data, {path, "merge 1", "'zz'", "not in the vocabulary"});
  j["model"]["merges"] = json::array({json::array({"a", "b"})});  // "ab" is not a token
  dir.write("tokenizer.json", j.dump());
  expect_error(path, ErrorKind::corrupt_data, {path, "makes 'ab'"});
  j["model"]["merges"] = json::array({"a b c"});  // the legacy string form, with three parts
  dir.write("tokenizer.json", j.dump());
  expect_error(path, ErrorKind::corrupt_data, {path, "merge 1"});
}

TEST(LoadErrors, BadMergesTxtLine) {
  test::TempDir dir;
  dir.write("vocab.json", R"({"a": 0, "b": 1, "ab": 2})");
  const std::string merges = dir.write("merges.txt", "#version: 0.2\na b\nab\n");
  expect_error(dir.path().string(), ErrorKind::corrupt_data, {merges, "line 3"});
  dir.write("merges.txt", "#version: 0.2\na b\nb q\n");
  expect_error(dir.path().string(), ErrorKind::corrupt_data,
               {dir.file("vocab.json"), "merge 2", "'q'"});
}

TEST(LoadErrors, UnsupportedPipelines) {
  test::TempDir dir;
  json j = test::tiny_tokenizer_json({}, {});
  j["model"]["type"] = "WordPiece";
  const std::string path = dir.write("tokenizer.json", j.dump());
  expect_error(path, ErrorKind::unsupported, {path, "WordPiece"});
  j = test::tiny_tokenizer_json({}, {});
  j["normalizer"] = {{"type", "Lowercase"}};
  dir.write("tokenizer.json", j.dump());
  expect_error(path, ErrorKind::unsupported, {"Lowercase"});
  j = test::tiny_tokenizer_json({}, {});
  j["decoder"] = {{"type", "WordPiece"}};
  dir.write("tokenizer.json", j.dump());
  expect_error(path, ErrorKind::unsupported, {"decoder"});
  j = test::tiny_tokenizer_json({}, {});
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern", {{"Regex", "(unclosed"}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                          {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  dir.write("tokenizer.json", j.dump());
  expect_error(path, ErrorKind::corrupt_data, {path, "(unclosed", "does not compile"});
}

TEST(ChatTemplate, FromTokenizerConfigOrJinjaFile) {
  EXPECT_TRUE(test::qwen3().chat_template().empty());  // a bare tokenizer.json
  EXPECT_EQ(test::qwen2().chat_template().rfind("{% set system_message", 0), 0u);

  test::TempDir dir;
  dir.write("tokenizer.json", test::tiny_tokenizer_json({}, {}).dump());
  dir.write("tokenizer_config.json", R"({"chat_template": "from config"})");
  EXPECT_EQ(Tokenizer::load(dir.path().string())->chat_template(), "from config");
  EXPECT_EQ(Tokenizer::load(dir.file("tokenizer.json"))->chat_template(), "from config");
  // transformers lets chat_template.jinja clobber the config's template.
  dir.write("chat_template.jinja", "from file");
  EXPECT_EQ(Tokenizer::load(dir.path().string())->chat_template(), "from file");
  fs::remove(dir.file("chat_template.jinja"));
  dir.write("tokenizer_config.json",
            R"({"chat_template": [{"name": "tool_use", "template": "T"},
                                  {"name": "default", "template": "D"}]})");
  EXPECT_EQ(Tokenizer::load(dir.path().string())->chat_template(), "D");
}

TEST(VocabMergesForm, AddedTokensFromTokenizerConfig) {
  test::TempDir dir;
  dir.write("vocab.json", R"({"a": 0, "b": 1, "ab": 2, "<": 3, ">": 4})");
  dir.write("merges.txt", "#version: 0.2\na b\n");
  dir.write("tokenizer_config.json", R"({"tokenizer_class": "Qwen2Tokenizer",
      "added_tokens_decoder": {"5": {"content": "<eot>", "special": true},
                               "6": {"content": "<x>", "special": false}}})");
  auto tok = Tokenizer::load(dir.path().string());
  EXPECT_EQ(tok->encode("ab<eot>a<x>"), (std::vector<int32_t>{2, 5, 0, 6}));
  EXPECT_EQ(tok->vocab_size(), 7);
  EXPECT_TRUE(tok->is_special(5));
  EXPECT_FALSE(tok->is_special(6));
  EXPECT_EQ(tok->decode(std::vector<int32_t>{2, 5, 6}, true), "ab<x>");
}

}  // namespace
}  // namespace hibana
