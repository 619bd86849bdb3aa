#include "server/auth.h"

#include <arpa/inet.h>

#include <cctype>

namespace hibana::server {

bool is_loopback_host(const std::string& host) {
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h == "localhost" || h == "::1" || h == "ip6-localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&v6)) return v6.s6_addr[12] == 127;
  }
  return false;
}

namespace {

bool same(const std::string& a, const std::string& b) {
  // Constant time in the length of the candidate: no early exit on the first difference.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

std::string bearer_token(const std::string& header) {
  size_t i = 0;
  while (i < header.size() && std::isspace(static_cast<unsigned char>(header[i]))) ++i;
  static const std::string kBearer = "bearer";
  if (header.size() - i < kBearer.size()) return {};
  for (size_t k = 0; k < kBearer.size(); ++k) {
    if (std::tolower(static_cast<unsigned char>(header[i + k])) != kBearer[k]) return {};
  }
  i += kBearer.size();
  if (i >= header.size() || !std::isspace(static_cast<unsigned char>(header[i]))) return {};
  while (i < header.size() && std::isspace(static_cast<unsigned char>(header[i]))) ++i;
  size_t end = header.size();
  while (end > i && std::isspace(static_cast<unsigned char>(header[end - 1]))) --end;
  return header.substr(i, end - i);
}

}  // namespace

bool authorized(const std::vector<std::string>& keys, const std::string& authorization_header,
                const std::string& x_api_key_header) {
  if (keys.empty()) return true;
  const std::string bearer = bearer_token(authorization_header);
  bool ok = false;
  for (const std::string& key : keys) {
    ok |= !bearer.empty() && same(key, bearer);
    ok |= !x_api_key_header.empty() && same(key, x_api_key_header);
  }
  return ok;
}

bool route_needs_key(const std::string& path) {
  return !(path == "/" || path == "/health" || path == "/metrics");
}

}  // namespace hibana::server
