#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace hibana {

// Everything before the held-back tail is emitted through the same lossy conversion decode()
// uses. The tail starts at a lead byte, so no ill-formed subpart of the whole stream straddles
// the cut, and push()* + flush() equals decode() of all the ids.
std::string StreamDecoder::push(int32_t id) {
  pending_.append(tokenizer_.token_bytes(id));
  const size_t ready = pending_.size() - utf8::incomplete_tail(pending_);
  std::string out;
  if (ready == 0) return out;
  const std::string_view head(pending_.data(), ready);
  if (utf8::is_valid(head)) {
    out.assign(head);
  } else {
    utf8::append_lossy(head, out);
  }
  pending_.erase(0, ready);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  utf8::append_lossy(pending_, out);
  pending_.clear();
  return out;
}

}  // namespace hibana
