#include "server/stop_strings.h"

#include <algorithm>

namespace hibana::server {

StopMatcher::StopMatcher(std::vector<StopString> stops) {
  for (auto& s : stops) {
    if (!s.text.empty()) stops_.push_back(std::move(s));
  }
}

std::string StopMatcher::push(std::string_view text) {
  if (matched_) return {};
  pending_.append(text);
  // The earliest complete stop wins; at the same position, the longest.
  size_t best = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    size_t at = pending_.find(stops_[i].text);
    if (at == std::string::npos) continue;
    if (best == std::string::npos || at < best ||
        (at == best && stops_[i].text.size() > stops_[*matched_].text.size())) {
      best = at;
      matched_ = i;
    }
  }
  if (matched_) {
    const StopString& s = stops_[*matched_];
    std::string out = pending_.substr(0, best + (s.keep ? s.text.size() : 0));
    pending_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const StopString& s : stops_) {
    size_t max_k = std::min(s.text.size() - 1, pending_.size());
    for (size_t k = max_k; k > hold; --k) {
      if (std::string_view(pending_).substr(pending_.size() - k) ==
          std::string_view(s.text).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  std::string out = std::move(pending_);
  pending_.clear();
  return out;
}

}  // namespace hibana::server
