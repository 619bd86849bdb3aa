// API keys and where they are needed. Clients send the key as "Authorization: Bearer KEY"
// (OpenAI SDKs, ANTHROPIC_AUTH_TOKEN) or "x-api-key: KEY" (Anthropic SDKs, ANTHROPIC_API_KEY).
#pragma once

#include <string>
#include <vector>

namespace hibana::server {

// Whether `host` is a loopback address or name (127.0.0.0/8, ::1, localhost): binding
// anything else without an API key exposes the server.
bool is_loopback_host(const std::string& host);

// Whether either header carries one of `keys` (compared in constant time). With no keys
// configured every request is authorized.
bool authorized(const std::vector<std::string>& keys, const std::string& authorization_header,
                const std::string& x_api_key_header);

// Whether a route needs the key: the /v1 API (and its unprefixed aliases); /health, /metrics
// and / stay open for probes and scrapers.
bool route_needs_key(const std::string& path);

}  // namespace hibana::server
