#include "server/billing_header.h"

#include <cctype>

namespace hibana::server {

namespace {

constexpr std::string_view kPrefix = "x-anthropic-billing-header:";

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// "2.1.197.3d9" -> "2.1.197": the leading components made only of digits.
std::string semver_part(std::string_view v) {
  std::string out;
  while (!v.empty()) {
    size_t dot = v.find('.');
    std::string_view part = v.substr(0, dot);
    bool digits = !part.empty();
    for (char c : part) digits = digits && std::isdigit(static_cast<unsigned char>(c));
    if (!digits) break;
    if (!out.empty()) out += '.';
    out += part;
    if (dot == std::string_view::npos) break;
    v.remove_prefix(dot + 1);
  }
  return out.empty() ? std::string(v) : out;
}

std::string normalize_line(std::string_view line) {
  std::string out(kPrefix);
  std::string_view rest = line.substr(kPrefix.size());
  // Keep the spacing after the colon as sent.
  size_t lead = 0;
  while (lead < rest.size() && rest[lead] == ' ') ++lead;
  out.append(rest.substr(0, lead));
  rest.remove_prefix(lead);
  bool first = true;
  while (!rest.empty()) {
    size_t semi = rest.find(';');
    std::string_view field = trim(rest.substr(0, semi));
    const bool terminated = semi != std::string_view::npos;
    rest = terminated ? rest.substr(semi + 1) : std::string_view{};
    if (field.empty()) continue;
    size_t eq = field.find('=');
    std::string_view key = trim(field.substr(0, eq));
    if (key == "cch") continue;
    std::string value;
    if (eq != std::string_view::npos) {
      value = std::string(trim(field.substr(eq + 1)));
      if (key == "cc_version") value = semver_part(value);
    }
    if (!first) out += ' ';
    first = false;
    out.append(key);
    if (eq != std::string_view::npos) out += "=" + value;
    if (terminated) out += ';';
  }
  return out;
}

}  // namespace

std::string normalize_billing_header(std::string_view text) {
  if (text.find(kPrefix) == std::string_view::npos) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line =
        text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    if (line.substr(0, kPrefix.size()) == kPrefix) {
      out += normalize_line(line);
    } else {
      out.append(line);
    }
    if (nl == std::string_view::npos) break;
    out += '\n';
    pos = nl + 1;
  }
  return out;
}

}  // namespace hibana::server
