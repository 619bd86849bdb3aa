// vocab.json + merges.txt + tokenizer_config.json: the form transformers saved before
// tokenizer.json existed (Qwen2 shipped this way). These files do not say how text is
// normalised and split; that lives in the tokenizer class, so tokenizer_config.json's
// "tokenizer_class" picks it (Qwen2Tokenizer: NFC + the Qwen2 regex; GPT2Tokenizer: the GPT-2
// regex).
#include <climits>
#include <filesystem>
#include <set>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "io/mapped_file.h"
#include "tokenizer/json_stream.h"
#include "tokenizer/tokenizer_spec.h"

namespace hibana {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

[[noreturn]] void corrupt(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::corrupt_data, path + ": " + what);
}

bool get_bool(const json& node, const char* key, bool fallback) {
  auto it = node.find(key);
  return it != node.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

void read_merges_txt(const std::string& path, TokenizerSpec& spec) {
  const MappedFile file(path);
  const std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
  size_t pos = 0;
  size_t line_no = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (line_no == 1 && line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
      corrupt(path, "line " + std::to_string(line_no) + " ('" + std::string(line) +
                        "') is not two tokens separated by one space");
    }
    spec.merges.emplace_back(std::string(line.substr(0, space)),
                             std::string(line.substr(space + 1)));
  }
}

// The strings tokenizer_config.json (or special_tokens_map.json) names as special tokens.
void collect_special_names(const json& config, std::set<std::string>& names) {
  if (!config.is_object()) return;
  for (const auto& [key, value] : config.items()) {
    const bool token_field = key.ends_with("_token") || key == "additional_special_tokens";
    if (!token_field) continue;
    auto add = [&](const json& v) {
      if (v.is_string()) names.insert(v.get<std::string>());
      if (v.is_object() && v.contains("content") && v["content"].is_string())
        names.insert(v["content"].get<std::string>());
    };
    if (value.is_array()) {
      for (const json& v : value) add(v);
    } else {
      add(value);
    }
  }
}

void read_added_tokens_decoder(const json& decoder, const std::string& path, TokenizerSpec& spec) {
  if (!decoder.is_object()) corrupt(path, "added_tokens_decoder is not an object");
  for (const auto& [key, node] : decoder.items()) {
    char* end = nullptr;
    const long long id = std::strtoll(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || id < 0 || id > INT32_MAX) {
      corrupt(path, "added_tokens_decoder key '" + key + "' is not a token id");
    }
    if (!node.is_object() || !node.contains("content") || !node["content"].is_string()) {
      corrupt(path, "added_tokens_decoder[" + key + "] has no string content");
    }
    AddedTokenSpec t;
    t.id = static_cast<int32_t>(id);
    t.content = node["content"].get<std::string>();
    t.special = get_bool(node, "special", false);
    t.single_word = get_bool(node, "single_word", false);
    t.lstrip = get_bool(node, "lstrip", false);
    t.rstrip = get_bool(node, "rstrip", false);
    t.normalized = get_bool(node, "normalized", !t.special);
    spec.added_tokens.push_back(std::move(t));
  }
}

// added_tokens.json ({"content": id}) from older checkpoints; special-ness comes from the
// token fields of the config files.
void read_added_tokens_json(const std::string& path, const std::set<std::string>& special_names,
                            TokenizerSpec& spec) {
  const json doc = parse_json_streaming(read_text_file(path), path, {});
  if (!doc.is_object()) corrupt(path, "not a JSON object");
  for (const auto& [content, id] : doc.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      corrupt(path, "the id of '" + content + "' is not a token id");
    }
    AddedTokenSpec t;
    t.id = static_cast<int32_t>(id.get<int64_t>());
    t.content = content;
    t.special = special_names.count(content) > 0;
    spec.added_tokens.push_back(std::move(t));
  }
}

}  // namespace

TokenizerSpec read_vocab_and_merges(const std::string& dir) {
  const fs::path d(dir);
  TokenizerSpec spec;
  const std::string vocab_path = (d / "vocab.json").string();
  spec.source = vocab_path;
  JsonStreams streams;
  streams.vocab_pointer = "";
  streams.vocab = &spec.vocab;
  const MappedFile vocab_file(vocab_path);
  const json vocab_doc = parse_json_streaming(
      std::string_view(reinterpret_cast<const char*>(vocab_file.data()), vocab_file.size()),
      vocab_path, streams);
  if (!vocab_doc.is_object()) corrupt(vocab_path, "not a JSON object");
  if (spec.vocab.empty()) corrupt(vocab_path, "the vocabulary is empty");
  read_merges_txt((d / "merges.txt").string(), spec);

  json config = json::object();
  const fs::path config_path = d / "tokenizer_config.json";
  std::error_code ec;
  if (fs::exists(config_path, ec)) {
    config = parse_json_streaming(read_text_file(config_path.string()), config_path.string(), {});
    if (!config.is_object()) corrupt(config_path.string(), "not a JSON object");
  } else {
    log_warn(dir, ": no tokenizer_config.json; assuming a Qwen2 tokenizer with no added tokens");
  }

  std::string tokenizer_class;
  if (auto it = config.find("tokenizer_class"); it != config.end() && it->is_string()) {
    tokenizer_class = it->get<std::string>();
  }
  if (tokenizer_class == "GPT2Tokenizer" || tokenizer_class == "GPT2TokenizerFast") {
    spec.split_patterns.push_back(kGpt2SplitPattern);
    spec.add_prefix_space = get_bool(config, "add_prefix_space", false);
  } else {
    if (!tokenizer_class.empty() && tokenizer_class != "Qwen2Tokenizer" &&
        tokenizer_class != "Qwen2TokenizerFast") {
      log_warn(config_path.string(), ": tokenizer_class '", tokenizer_class,
               "' is unknown; splitting text as Qwen2Tokenizer does");
    }
    spec.nfc = true;
    spec.split_patterns.push_back(kQwen2SplitPattern);
  }

  if (auto it = config.find("added_tokens_decoder"); it != config.end()) {
    read_added_tokens_decoder(*it, config_path.string(), spec);
  } else if (fs::exists(d / "added_tokens.json", ec)) {
    std::set<std::string> special_names;
    collect_special_names(config, special_names);
    const fs::path map_path = d / "special_tokens_map.json";
    if (fs::exists(map_path, ec)) {
      collect_special_names(
          parse_json_streaming(read_text_file(map_path.string()), map_path.string(), {}),
          special_names);
    }
    read_added_tokens_json((d / "added_tokens.json").string(), special_names, spec);
  }
  return spec;
}

}  // namespace hibana
