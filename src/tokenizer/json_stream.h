// Reads a JSON document while handing its big vocabulary and merge lists straight to vectors
// instead of building them as JSON values (internal to src/tokenizer/). tokenizer.json holds
// ~150k vocabulary entries and ~150k merges; streaming them makes loading about seven times
// faster than nlohmann's DOM and keeps the DOM (the rest of the file) small.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hibana {

struct JsonStreams {
  // JSON pointer of an object {"text": id, ...} to stream into `vocab` ("" is the root), or
  // nullptr for none.
  const char* vocab_pointer = nullptr;
  // JSON pointer of an array of merges, each "a b" or ["a", "b"], to stream into `merges`.
  const char* merges_pointer = nullptr;
  std::vector<std::pair<std::string, int32_t>>* vocab = nullptr;
  std::vector<std::pair<std::string, std::string>>* merges = nullptr;
};

// Parses `text` (the contents of `path`); streamed members are left as empty containers in the
// returned document. Throws Error(corrupt_data) naming `path` on malformed JSON or on streamed
// members of the wrong shape.
nlohmann::json parse_json_streaming(std::string_view text, const std::string& path,
                                    const JsonStreams& streams);

}  // namespace hibana
