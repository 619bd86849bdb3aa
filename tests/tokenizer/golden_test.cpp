// Every document of tests/fixtures/tokenizer/qwen3_golden.jsonl (made by
// tools/tokenizer/make_tokenizer_golden.py with the tokenizers package) must encode to the
// same ids, decode and stream back, and, when the file has "ids_vocab_merges" (transformers on
// the vocab.json + merges.txt form), the Qwen2 files must agree too (null: same as "ids").
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "qwen_tokenizers.h"

namespace hibana {
namespace {

using Ids = std::vector<int32_t>;

std::string golden_path() {
  return test::fixtures_dir() + "/tokenizer/qwen3_golden.jsonl";
}

std::string show(const Ids& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size() && i < 40; ++i) s += std::to_string(ids[i]) + " ";
  return ids.size() > 40 ? s + "..." : s;
}

TEST(Golden, Qwen3MatchesTokenizersPackage) {
  if (!std::filesystem::exists(golden_path())) {
    GTEST_SKIP() << golden_path()
                 << " is missing; make it with tools/tokenizer/make_tokenizer_golden.py";
  }
  std::ifstream in(golden_path());
  std::string line;
  size_t documents = 0, checked_vocab_merges = 0, failures = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::json row = nlohmann::json::parse(line);
    const std::string text = row.at("text").get<std::string>();
    const Ids expected = row.at("ids").get<Ids>();
    ++documents;
    const Ids ids = test::qwen3().encode(text);
    if (ids != expected) {
      ADD_FAILURE() << "document " << documents << " differs\n  text: " << text.substr(0, 200)
                    << "\n  want: " << show(expected) << "\n  got:  " << show(ids);
      if (++failures > 5) break;
      continue;
    }
    // decode(ids) is the NFC text, so encoding it again gives the same ids; streaming the ids
    // gives the same text as decode.
    const std::string decoded = test::qwen3().decode(ids);
    EXPECT_EQ(test::qwen3().encode(decoded), ids) << "document " << documents;
    StreamDecoder stream(test::qwen3());
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    EXPECT_EQ(streamed, decoded) << "document " << documents;
    if (auto it = row.find("ids_vocab_merges"); it != row.end()) {
      const Ids want = it->is_null() ? expected : it->get<Ids>();
      EXPECT_EQ(test::qwen2().encode(text), want) << "vocab.json form, document " << documents;
      ++checked_vocab_merges;
    }
  }
  EXPECT_GE(documents, 200u);
  std::printf("[ golden   ] %zu documents, %zu also with vocab.json + merges.txt\n", documents,
              checked_vocab_merges);
}

}  // namespace
}  // namespace hibana
