// tokenizer.json: the tokenizers package's single-file form. Only the pieces a byte-level BPE
// tokenizer (GPT-2, Qwen2/3/3.5 and kin) uses are accepted; anything else is refused by name
// rather than silently tokenized differently.
#include <cctype>
#include <climits>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "io/mapped_file.h"
#include "tokenizer/json_stream.h"
#include "tokenizer/tokenizer_spec.h"

namespace hibana {

namespace {

using json = nlohmann::json;

[[noreturn]] void unsupported(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::unsupported, path + ": " + what + " is not supported");
}
[[noreturn]] void corrupt(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::corrupt_data, path + ": " + what);
}

std::string type_of(const json& node) {
  auto it = node.find("type");
  return it != node.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool get_bool(const json& node, const char* key, bool fallback) {
  auto it = node.find(key);
  if (it == node.end() || it->is_null()) return fallback;
  return it->is_boolean() ? it->get<bool>() : fallback;
}

std::string non_empty_string(const json& node, const char* key) {
  auto it = node.find(key);
  return it != node.end() && it->is_string() ? it->get<std::string>() : std::string();
}

void read_normalizer(const json& node, const std::string& path, TokenizerSpec& spec) {
  if (node.is_null()) return;
  const std::string type = type_of(node);
  if (type == "NFC") {
    spec.nfc = true;
  } else if (type == "Sequence" && node.contains("normalizers") && node["normalizers"].is_array()) {
    for (const json& n : node["normalizers"]) read_normalizer(n, path, spec);
  } else {
    unsupported(path, "normalizer '" + type + "'");
  }
}

// Escapes a literal so that it can be used as a regex.
std::string regex_literal(const std::string& s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

void read_pre_tokenizer(const json& node, const std::string& path, TokenizerSpec& spec,
                        bool* byte_level) {
  if (node.is_null()) return;
  const std::string type = type_of(node);
  if (type == "Sequence") {
    auto it = node.find("pretokenizers");
    if (it == node.end() || !it->is_array()) corrupt(path, "Sequence pre_tokenizer has no list");
    for (const json& n : *it) read_pre_tokenizer(n, path, spec, byte_level);
  } else if (type == "Split") {
    const std::string behavior = non_empty_string(node, "behavior");
    if (behavior != "Isolated") unsupported(path, "Split behavior '" + behavior + "'");
    if (get_bool(node, "invert", false)) unsupported(path, "Split with invert");
    auto pattern = node.find("pattern");
    if (pattern == node.end() || !pattern->is_object()) corrupt(path, "Split has no pattern");
    if (pattern->contains("Regex") && (*pattern)["Regex"].is_string()) {
      spec.split_patterns.push_back((*pattern)["Regex"].get<std::string>());
    } else if (pattern->contains("String") && (*pattern)["String"].is_string()) {
      spec.split_patterns.push_back(regex_literal((*pattern)["String"].get<std::string>()));
    } else {
      corrupt(path, "Split pattern is neither Regex nor String");
    }
  } else if (type == "ByteLevel") {
    *byte_level = true;
    if (get_bool(node, "add_prefix_space", false)) {
      // The prefix goes on each piece the earlier steps made; only the common case (ByteLevel
      // first, pieces = text between added tokens) is implemented.
      if (!spec.split_patterns.empty()) unsupported(path, "ByteLevel add_prefix_space after Split");
      spec.add_prefix_space = true;
    }
    if (get_bool(node, "use_regex", true)) spec.split_patterns.push_back(kGpt2SplitPattern);
  } else {
    unsupported(path, "pre_tokenizer '" + type + "'");
  }
}

bool has_byte_level_decoder(const json& node) {
  const std::string type = type_of(node);
  if (type == "ByteLevel") return true;
  if (type == "Sequence" && node.contains("decoders") && node["decoders"].is_array()) {
    const json& list = node["decoders"];
    return list.size() == 1 && has_byte_level_decoder(list[0]);
  }
  return false;
}

void read_model_options(const json& model, const std::string& path, TokenizerSpec& spec) {
  const std::string type = type_of(model);
  if (!type.empty() && type != "BPE") unsupported(path, "model type '" + type + "'");
  if (auto it = model.find("dropout"); it != model.end() && it->is_number() && it->get<double>())
    unsupported(path, "BPE dropout");
  if (!non_empty_string(model, "continuing_subword_prefix").empty())
    unsupported(path, "BPE continuing_subword_prefix");
  if (!non_empty_string(model, "end_of_word_suffix").empty())
    unsupported(path, "BPE end_of_word_suffix");
  if (get_bool(model, "byte_fallback", false)) unsupported(path, "BPE byte_fallback");
  spec.ignore_merges = get_bool(model, "ignore_merges", false);
}

AddedTokenSpec read_added_token(const json& node, const std::string& path) {
  if (!node.is_object() || !node.contains("id") || !node["id"].is_number_integer() ||
      !node.contains("content") || !node["content"].is_string()) {
    corrupt(path, "an added_tokens entry lacks an integer id or a string content");
  }
  AddedTokenSpec t;
  const int64_t id = node["id"].get<int64_t>();
  if (id < 0 || id > INT32_MAX) corrupt(path, "added token id " + std::to_string(id));
  t.id = static_cast<int32_t>(id);
  t.content = node["content"].get<std::string>();
  t.special = get_bool(node, "special", false);
  t.single_word = get_bool(node, "single_word", false);
  t.lstrip = get_bool(node, "lstrip", false);
  t.rstrip = get_bool(node, "rstrip", false);
  t.normalized = get_bool(node, "normalized", !t.special);
  return t;
}

}  // namespace

TokenizerSpec read_tokenizer_json(const std::string& path) {
  const MappedFile file(path);  // mapped, not copied: the file is ~11 MB
  const std::string_view text(reinterpret_cast<const char*>(file.data()), file.size());
  TokenizerSpec spec;
  spec.source = path;
  // Every entry takes well over 32 bytes of JSON; untouched reserved pages cost nothing.
  spec.vocab.reserve(text.size() / 32);
  spec.merges.reserve(text.size() / 32);
  JsonStreams streams;
  streams.vocab_pointer = "/model/vocab";
  streams.merges_pointer = "/model/merges";
  streams.vocab = &spec.vocab;
  streams.merges = &spec.merges;
  const json doc = parse_json_streaming(text, path, streams);
  if (!doc.is_object()) corrupt(path, "not a JSON object");
  auto model = doc.find("model");
  if (model == doc.end() || !model->is_object()) corrupt(path, "no \"model\" object");
  read_model_options(*model, path, spec);
  if (spec.vocab.empty()) corrupt(path, "the model has no vocabulary (model.vocab)");

  if (auto it = doc.find("added_tokens"); it != doc.end() && !it->is_null()) {
    if (!it->is_array()) corrupt(path, "added_tokens is not a list");
    for (const json& t : *it) spec.added_tokens.push_back(read_added_token(t, path));
  }
  if (auto it = doc.find("normalizer"); it != doc.end()) read_normalizer(*it, path, spec);
  bool byte_level = false;
  if (auto it = doc.find("pre_tokenizer"); it != doc.end()) {
    read_pre_tokenizer(*it, path, spec, &byte_level);
  }
  if (!byte_level) unsupported(path, "a tokenizer without a ByteLevel pre_tokenizer");
  auto decoder = doc.find("decoder");
  if (decoder == doc.end() || !has_byte_level_decoder(*decoder)) {
    unsupported(path, "a decoder other than ByteLevel");
  }
  if (auto it = doc.find("post_processor"); it != doc.end() && !it->is_null()) {
    // Post-processors add BOS/EOS for add_special_tokens=True; encode() never adds tokens.
    log_debug(path, ": ignoring post_processor '", type_of(*it), "'");
  }
  return spec;
}

}  // namespace hibana
