#include "tokenizer/json_stream.h"

#include <limits>

#include "core/error.h"

namespace hibana {

namespace {

using json = nlohmann::json;

class StreamingHandler final : public nlohmann::json_sax<json> {
 public:
  explicit StreamingHandler(const JsonStreams& streams) : streams_(streams) {}

  json take() { return std::move(root_); }
  const std::string& error() const { return error_; }

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::vocab) return vocab_entry(v);
    return value(json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::vocab) {
      return vocab_entry(v > static_cast<number_unsigned_t>(std::numeric_limits<int64_t>::max())
                             ? -1
                             : static_cast<int64_t>(v));
    }
    return value(json(v));
  }
  bool number_float(number_float_t v, const string_t&) override {
    if (mode_ == Mode::vocab) return fail("vocabulary id of '" + key_ + "' is not an integer");
    return value(json(v));
  }
  bool string(string_t& v) override {
    switch (mode_) {
      case Mode::vocab:
        return fail("vocabulary id of '" + key_ + "' is not an integer");
      case Mode::merges:
        return merge_line(v);
      case Mode::merge_pair:
        if (pair_.size() >= 2) return fail("a merge has more than two parts");
        pair_.push_back(std::move(v));
        return true;
      case Mode::dom:
        break;
    }
    return value(json(std::move(v)));
  }
  bool binary(binary_t&) override { return fail("binary values are not JSON"); }

  bool start_object(std::size_t) override {
    if (mode_ != Mode::dom) return fail("unexpected object inside " + streamed_pointer_);
    const std::string pointer = child_pointer();
    if (streams_.vocab_pointer && pointer == streams_.vocab_pointer) {
      return begin_stream(Mode::vocab, pointer, json::object());
    }
    json* v = place(json::object());
    containers_.push_back({v, pointer});
    return true;
  }
  bool key(string_t& k) override {
    if (mode_ == Mode::vocab) {
      key_ = std::move(k);
      return true;
    }
    key_ = k;
    member_ = &(*containers_.back().value)[k];
    return true;
  }
  bool end_object() override {
    if (mode_ == Mode::vocab) {
      mode_ = Mode::dom;
      return true;
    }
    containers_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::merges) {
      mode_ = Mode::merge_pair;
      pair_.clear();
      return true;
    }
    if (mode_ != Mode::dom) return fail("unexpected array inside " + streamed_pointer_);
    const std::string pointer = child_pointer();
    if (streams_.merges_pointer && pointer == streams_.merges_pointer) {
      return begin_stream(Mode::merges, pointer, json::array());
    }
    json* v = place(json::array());
    containers_.push_back({v, pointer});
    return true;
  }
  bool end_array() override {
    if (mode_ == Mode::merge_pair) {
      if (pair_.size() != 2)
        return fail("merge " + std::to_string(merge_count() + 1) + " does not have two parts");
      streams_.merges->emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      mode_ = Mode::merges;
      return true;
    }
    if (mode_ == Mode::merges) {
      mode_ = Mode::dom;
      return true;
    }
    containers_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    if (error_.empty()) error_ = std::string("malformed JSON (") + e.what() + ")";
    return false;
  }

 private:
  enum class Mode { dom, vocab, merges, merge_pair };
  struct Container {
    json* value;
    std::string pointer;
  };

  bool fail(const std::string& message) {
    if (error_.empty()) error_ = message;
    return false;
  }
  size_t merge_count() const { return streams_.merges ? streams_.merges->size() : 0; }

  std::string child_pointer() const {
    if (containers_.empty()) return "";
    const Container& parent = containers_.back();
    return parent.pointer + "/" + (parent.value->is_object() ? key_ : std::string("-"));
  }

  // Puts a value where the parser is (root, array element or object member).
  json* place(json&& v) {
    if (containers_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json* parent = containers_.back().value;
    if (parent->is_array()) {
      parent->push_back(std::move(v));
      return &parent->back();
    }
    *member_ = std::move(v);
    return member_;
  }
  bool value(json&& v) {
    if (mode_ != Mode::dom) return fail("unexpected value inside " + streamed_pointer_);
    place(std::move(v));
    return true;
  }

  bool begin_stream(Mode mode, const std::string& pointer, json&& placeholder) {
    if ((mode == Mode::vocab && !streams_.vocab) || (mode == Mode::merges && !streams_.merges)) {
      return fail("internal: no destination for " + pointer);
    }
    place(std::move(placeholder));
    mode_ = mode;
    streamed_pointer_ = pointer.empty() ? "the vocabulary" : pointer;
    return true;
  }

  bool vocab_entry(int64_t id) {
    if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
      return fail("vocabulary id " + std::to_string(id) + " of '" + key_ + "' is out of range");
    }
    streams_.vocab->emplace_back(std::move(key_), static_cast<int32_t>(id));
    return true;
  }

  bool merge_line(const std::string& line) {
    // The tokenizers package splits legacy "a b" merges on single spaces and wants two parts.
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
      return fail("merge " + std::to_string(merge_count() + 1) + " ('" + line +
                  "') is not two tokens separated by one space");
    }
    streams_.merges->emplace_back(line.substr(0, space), line.substr(space + 1));
    return true;
  }

  const JsonStreams& streams_;
  json root_;
  std::vector<Container> containers_;
  json* member_ = nullptr;
  std::string key_;
  Mode mode_ = Mode::dom;
  std::string streamed_pointer_;
  std::vector<std::string> pair_;
  std::string error_;
};

}  // namespace

nlohmann::json parse_json_streaming(std::string_view text, const std::string& path,
                                    const JsonStreams& streams) {
  StreamingHandler handler(streams);
  const bool ok = json::sax_parse(text.begin(), text.end(), &handler);
  if (!ok) {
    throw Error(ErrorKind::corrupt_data,
                path + ": " + (handler.error().empty() ? "malformed JSON" : handler.error()));
  }
  return handler.take();
}

}  // namespace hibana
