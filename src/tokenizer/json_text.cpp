#include "tokenizer/json_text.h"

#include <nlohmann/json.hpp>
#include <set>

namespace hibana {

namespace {

using json = nlohmann::json;

void append_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 15]);
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

// Writes each SAX event as text. nlohmann's parser hands over a float's source text with its
// value; integers arrive as int64/uint64 (exact), and longer integers arrive as floats, text
// included.
class Rewriter final : public nlohmann::json_sax<json> {
 public:
  explicit Rewriter(JsonTextStyle style) : style_(style) {}

  JsonText result;
  bool repeated_key = false;

  bool null() override { return scalar("null"); }
  bool boolean(bool v) override { return scalar(v ? "true" : "false"); }
  bool number_integer(number_integer_t v) override { return scalar(std::to_string(v)); }
  bool number_unsigned(number_unsigned_t v) override { return scalar(std::to_string(v)); }
  bool number_float(number_float_t, const string_t& s) override { return scalar(s); }
  bool string(string_t& v) override {
    begin_value();
    append_string(result.text, v);
    return end_value();
  }
  bool binary(binary_t&) override { return false; }
  bool start_object(std::size_t) override {
    begin_value();
    result.text.push_back('{');
    frames_.push_back(Frame{true, 0, {}});
    return true;
  }
  bool key(string_t& k) override {
    Frame& f = frames_.back();
    if (!f.keys.insert(k).second) {
      repeated_key = true;
      return false;
    }
    if (f.count++ > 0) result.text += style_.item_separator;
    append_string(result.text, k);
    result.text += style_.key_separator;
    if (frames_.size() == 1) {
      result.members.push_back({k, {result.text.size(), result.text.size()}});
    }
    return true;
  }
  bool end_object() override {
    frames_.pop_back();
    result.text.push_back('}');
    return end_value();
  }
  bool start_array(std::size_t) override {
    begin_value();
    result.text.push_back('[');
    frames_.push_back(Frame{false, 0, {}});
    return true;
  }
  bool end_array() override {
    frames_.pop_back();
    result.text.push_back(']');
    return end_value();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  struct Frame {
    bool object = false;
    size_t count = 0;
    std::set<std::string> keys;
  };

  void begin_value() {
    if (frames_.empty() || frames_.back().object) return;  // a member's key wrote the separator
    if (frames_.back().count++ > 0) result.text += style_.item_separator;
  }
  bool end_value() {
    if (frames_.size() == 1 && frames_.back().object) {
      result.members.back().second.second = result.text.size();
    }
    return true;
  }
  bool scalar(std::string_view text) {
    begin_value();
    result.text += text;
    return end_value();
  }

  JsonTextStyle style_;
  std::vector<Frame> frames_;
};

}  // namespace

std::optional<std::string_view> JsonText::member(std::string_view key) const {
  for (const auto& [name, span] : members) {
    if (name == key) return std::string_view(text).substr(span.first, span.second - span.first);
  }
  return std::nullopt;
}

std::optional<JsonText> rewrite_json(std::string_view text, JsonTextStyle style) {
  Rewriter rewriter(style);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &rewriter);
  } catch (const json::exception&) {
    ok = false;
  }
  if (!ok || rewriter.repeated_key) return std::nullopt;
  return std::move(rewriter.result);
}

}  // namespace hibana
