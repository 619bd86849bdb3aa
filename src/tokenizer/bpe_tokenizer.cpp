#include "tokenizer/bpe_tokenizer.h"

#include "tokenizer/utf8.h"

namespace hibana {

// Hands out a pooled Scratch and gives it back when the encode() call ends.
class BpeTokenizer::ScratchLease {
 public:
  explicit ScratchLease(const BpeTokenizer& owner) : owner_(owner) {
    {
      std::lock_guard<std::mutex> lock(owner_.pool_mutex_);
      if (!owner_.pool_.empty()) {
        scratch_ = std::move(owner_.pool_.back());
        owner_.pool_.pop_back();
      }
    }
    if (!scratch_) {
      scratch_ = std::make_unique<Scratch>();
      scratch_->regex = owner_.splitter_.make_scratch();
    }
  }
  ~ScratchLease() {
    std::lock_guard<std::mutex> lock(owner_.pool_mutex_);
    owner_.pool_.push_back(std::move(scratch_));
  }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  Scratch& operator*() { return *scratch_; }

 private:
  const BpeTokenizer& owner_;
  std::unique_ptr<Scratch> scratch_;
};

BpeTokenizer::BpeTokenizer(const TokenizerSpec& spec)
    : vocab_(spec),
      bpe_(spec),
      splitter_(spec.split_patterns, spec.source),
      ignore_merges_(spec.ignore_merges),
      add_prefix_space_(spec.add_prefix_space),
      chat_template_(spec.chat_template) {
  if (spec.nfc) nfc_.emplace();
  for (const AddedTokenSpec& t : spec.added_tokens) {
    if (!t.normalized) {
      raw_added_.add(t.content, t);
    } else if (nfc_) {
      // tokenizers searches for a normalized token's own normalised form.
      std::string buffer;
      normalized_added_.add(std::string(nfc_->normalize(t.content, buffer)), t);
    } else {
      normalized_added_.add(t.content, t);
    }
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  ScratchLease lease(*this);
  Scratch& s = *lease;
  // encode() takes UTF-8; invalid bytes are replaced with U+FFFD first (as Python's
  // decode(errors="replace") would) so that the regex engine only ever sees valid text.
  if (!utf8::is_valid(text)) {
    s.repaired.clear();
    utf8::append_lossy(text, s.repaired);
    text = s.repaired;
  }
  if (parse_special && !raw_added_.empty()) {
    raw_added_.split(
        text, [&](std::string_view part) { encode_segment(part, parse_special, s, out); },
        [&](int32_t id) { out.push_back(id); });
  } else {
    encode_segment(text, parse_special, s, out);
  }
  return out;
}

void BpeTokenizer::encode_segment(std::string_view text, bool parse_special, Scratch& s,
                                  std::vector<int32_t>& out) const {
  if (nfc_) text = nfc_->normalize(text, s.normalized);
  if (parse_special && !normalized_added_.empty()) {
    normalized_added_.split(
        text, [&](std::string_view part) { encode_plain(part, s, out); },
        [&](int32_t id) { out.push_back(id); });
  } else {
    encode_plain(text, s, out);
  }
}

void BpeTokenizer::encode_plain(std::string_view text, Scratch& s,
                                std::vector<int32_t>& out) const {
  if (text.empty()) return;
  if (add_prefix_space_ && text.front() != ' ') {
    s.prefixed.clear();
    s.prefixed.push_back(' ');
    s.prefixed.append(text);
    text = s.prefixed;
  }
  splitter_.split(text, *s.regex, s.pieces);
  for (const Piece& piece : s.pieces) {
    encode_word(text.substr(piece.begin, piece.end - piece.begin), s, out);
  }
}

void BpeTokenizer::encode_word(std::string_view word, Scratch& s, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (std::optional<int32_t> id = vocab_.find_model_bytes(word)) {
      out.push_back(*id);
      return;
    }
  }
  if (word.size() > WordCache::kMaxWordBytes) {
    bpe_.encode(word, s.bpe, out);
    return;
  }
  const uint64_t hash = WordCache::hash(word);
  std::span<const int32_t> cached = s.cache.find(word, hash);
  if (!cached.empty()) {
    out.insert(out.end(), cached.begin(), cached.end());
    return;
  }
  const size_t before = out.size();
  bpe_.encode(word, s.bpe, out);
  s.cache.insert(word, hash, std::span<const int32_t>(out.data() + before, out.size() - before));
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (skip_special && vocab_.is_special(id)) continue;
    bytes.append(vocab_.bytes(id));  // unknown ids add nothing, as in tokenizers
  }
  if (utf8::is_valid(bytes)) return bytes;
  std::string text;
  text.reserve(bytes.size() + 8);
  utf8::append_lossy(bytes, text);
  return text;
}

}  // namespace hibana
