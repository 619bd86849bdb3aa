// JSON text rewritten in a normal layout without passing its numbers through doubles. A DOM
// parse keeps an integer past 64 bits, or a fraction with more digits than a double holds
// (0.10000000000000000000001), only as a double, so dumping it again changes what the model
// wrote (123456789012345678901234567890 became 1.2345678901234568e+29). Here every number
// keeps its text exactly; only whitespace and separators are normalised and strings re-escaped.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hibana {

struct JsonTextStyle {
  std::string_view item_separator = ", ";  // the defaults are Python's json.dumps
  std::string_view key_separator = ": ";
};
inline constexpr JsonTextStyle kCompactJson{",", ":"};

struct JsonText {
  std::string text;  // the whole document, rewritten
  // When the document is an object: where each member's value lies in `text`, in order.
  std::vector<std::pair<std::string, std::pair<size_t, size_t>>> members;

  // The rewritten value of the member `key`, or nullopt when the root has no such member.
  std::optional<std::string_view> member(std::string_view key) const;
};

// `text` rewritten in `style` (strings escaped as json.dumps(ensure_ascii=False) does), or
// nullopt when it is not valid JSON or some object repeats a key (a DOM keeps one of the
// values; the caller decides which).
std::optional<JsonText> rewrite_json(std::string_view text, JsonTextStyle style = {});

}  // namespace hibana
