// Small byte-level BPE tokenizers written to a temporary directory, for tests of the loading
// rules and of BPE itself without the 150k-entry Qwen files.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/byte_level.h"

namespace hibana::test {

// A directory under the system temp folder, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ =
        std::filesystem::temp_directory_path() /
        ("hibana_tokenizer_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string write(const std::string& name, const std::string& content) const {
    std::ofstream out(path_ / name, std::ios::binary);
    out << content;
    return file(name);
  }

 private:
  std::filesystem::path path_;
};

// tokenizer.json with one token per byte (id = byte value), then `extra` tokens (raw bytes,
// ids from 256 on), the given merges (raw bytes of the left and right token) and the GPT-2
// pre-tokenizer.
inline nlohmann::json tiny_tokenizer_json(
    const std::vector<std::string>& extra,
    const std::vector<std::pair<std::string, std::string>>& merges) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    vocab[byte_level::bytes_to_text(std::string(1, static_cast<char>(b)))] = b;
  }
  for (size_t i = 0; i < extra.size(); ++i) vocab[byte_level::bytes_to_text(extra[i])] = 256 + i;
  nlohmann::json m = nlohmann::json::array();
  for (const auto& [left, right] : merges) {
    m.push_back({byte_level::bytes_to_text(left), byte_level::bytes_to_text(right)});
  }
  return {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}}},
  };
}

inline nlohmann::json added_token(int id, const std::string& content, bool special = true) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

}  // namespace hibana::test
