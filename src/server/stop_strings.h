// Stop strings over streamed text: text that may still become a stop string is held back, so
// a stop string split across tokens is found and never reaches the client. The first stop
// string to complete (earliest in the text) ends the output; text after it is dropped.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hibana::server {

struct StopString {
  std::string text;
  bool keep = false;  // the stop text itself stays in the output (internal stops: </tool_call>)
};

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<StopString> stops);

  // Feeds generated text; returns what can be released now (after a stop: nothing more).
  std::string push(std::string_view text);
  // End of output: releases what was held back (a partial stop that never completed).
  std::string flush();

  bool stopped() const { return matched_.has_value(); }
  // The stop string that ended the output.
  const StopString* matched() const { return matched_ ? &stops_[*matched_] : nullptr; }

 private:
  std::vector<StopString> stops_;
  std::string pending_;
  std::optional<size_t> matched_;
};

}  // namespace hibana::server
