#include "tokenizer/vocabulary.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace hibana {

namespace {
// Far above any real vocabulary (Qwen3.5: 248k); guards against absurd ids allocating gigabytes.
constexpr int64_t kMaxVocabulary = int64_t{1} << 24;
}  // namespace

Vocabulary::Vocabulary(const TokenizerSpec& spec) {
  int64_t limit = 0;
  for (const auto& [text, id] : spec.vocab) limit = std::max<int64_t>(limit, int64_t{id} + 1);
  for (const AddedTokenSpec& t : spec.added_tokens)
    limit = std::max<int64_t>(limit, int64_t{t.id} + 1);
  if (limit > kMaxVocabulary) {
    throw Error(ErrorKind::corrupt_data,
                spec.source + ": token id " + std::to_string(limit - 1) + " is implausibly large");
  }

  // Each id's bytes: added tokens win over model tokens with the same id, as in tokenizers'
  // id_to_token.
  std::vector<std::string> bytes(static_cast<size_t>(limit));
  std::vector<bool> from_model(static_cast<size_t>(limit), false);
  for (const auto& [text, id] : spec.vocab) {
    std::optional<std::string> b = byte_level::text_to_bytes(text);
    if (b) {
      bytes[id] = std::move(*b);
      from_model[id] = true;
    } else {
      bytes[id] = text;  // what the ByteLevel decoder does with such a token
      model_by_odd_text_[text] = id;
    }
  }
  special_.assign(static_cast<size_t>(limit), false);
  for (const AddedTokenSpec& t : spec.added_tokens) {
    bytes[t.id] = byte_level::decoded_bytes(t.content);
    from_model[t.id] = false;
    special_[t.id] = t.special;
    added_by_content_[t.content] = t.id;
  }

  size_t total = 0;
  for (const std::string& b : bytes) total += b.size();
  if (total >= UINT32_MAX) {
    throw Error(ErrorKind::corrupt_data, spec.source + ": the vocabulary is too large");
  }
  arena_.reserve(total);
  offsets_.reserve(bytes.size() + 1);
  for (const std::string& b : bytes) {
    offsets_.push_back(static_cast<uint32_t>(arena_.size()));
    arena_.append(b);
  }
  offsets_.push_back(static_cast<uint32_t>(arena_.size()));

  // Model tokens by bytes (views into the finished arena). An id an added token took over is
  // looked up through its own text instead.
  model_by_bytes_.reserve(spec.vocab.size());
  for (const auto& [text, id] : spec.vocab) {
    if (from_model[id]) model_by_bytes_.insert(this->bytes(id), id);
  }
  for (const auto& [text, id] : spec.vocab) {
    if (!from_model[id] && !model_by_odd_text_.count(text)) model_by_odd_text_[text] = id;
  }
}

std::optional<int32_t> Vocabulary::find_text(std::string_view text) const {
  if (auto it = added_by_content_.find(std::string(text)); it != added_by_content_.end()) {
    return it->second;
  }
  if (std::optional<std::string> b = byte_level::text_to_bytes(text)) {
    if (std::optional<int32_t> id = model_by_bytes_.find(*b)) return id;
  }
  if (auto it = model_by_odd_text_.find(std::string(text)); it != model_by_odd_text_.end()) {
    return it->second;
  }
  return std::nullopt;
}

std::optional<int32_t> Vocabulary::find_model_bytes(std::string_view bytes) const {
  return model_by_bytes_.find(bytes);
}

}  // namespace hibana
