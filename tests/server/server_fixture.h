// Shared pieces of the server tests: the embedded model's tokenizer and template, a served
// model over a scripted FakeService or the real engine, an HTTP server on a free port, and an
// SSE parser.
#pragma once

#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "server/fake_service.h"
#include "server/http_server.h"
#include "server/served_model.h"
#include "tokenizer/tokenizer.h"

namespace hibana::test {

using nlohmann::json;

inline std::string tiny_model_dir() {
  return std::string(HIBANA_SOURCE_DIR) + "/models/hibana-tiny";
}

inline std::shared_ptr<const Tokenizer> tiny_tokenizer() {
  static std::shared_ptr<const Tokenizer> t = Tokenizer::load(tiny_model_dir());
  return t;
}

// The embedded model over a scripted service.
inline std::shared_ptr<server::ServedModel> fake_model(std::shared_ptr<FakeService> service) {
  return server::ServedModel::open(tiny_model_dir(), {"hibana-tiny", "alias"}, std::move(service));
}

// The embedded model on the real engine (loaded once for the whole test binary).
inline std::shared_ptr<server::GenerationService> real_service() {
  static std::shared_ptr<server::GenerationService> service = [] {
    std::shared_ptr<const Model> model = Model::load(tiny_model_dir(), make_cpu_backend());
    EngineOptions o;
    o.kv_cache_bytes = int64_t(256) << 20;
    o.max_sequences = 16;
    o.max_context = 4096;
    return std::shared_ptr<server::GenerationService>(
        server::make_engine_service(std::make_shared<Engine>(model, o)));
  }();
  return service;
}

struct TestServer {
  explicit TestServer(std::shared_ptr<const server::ServedModel> model,
                      server::ServerOptions options = {})
      : http([&] {
          options.port = 0;
          options.host = "127.0.0.1";
          return options;
        }()) {
    port = http.start();
    if (model) http.set_model(std::move(model));
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    return c;
  }
  server::HttpServer http;
  int port = 0;
};

struct SseEvent {
  std::string event;  // "" when the block had no event: line
  std::string data;
  json json_data;  // parsed data (null for "[DONE]" or non-JSON)
};

// Splits an SSE body into events; fails the test on malformed framing.
inline std::vector<SseEvent> parse_sse(const std::string& body) {
  std::vector<SseEvent> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      ADD_FAILURE() << "unterminated SSE block: " << body.substr(pos);
      break;
    }
    std::string block = body.substr(pos, end - pos);
    pos = end + 2;
    SseEvent e;
    size_t lp = 0;
    while (lp <= block.size()) {
      size_t nl = block.find('\n', lp);
      std::string line = block.substr(lp, nl == std::string::npos ? std::string::npos : nl - lp);
      if (line.rfind("event: ", 0) == 0) {
        e.event = line.substr(7);
      } else if (line.rfind("data: ", 0) == 0) {
        e.data = line.substr(6);
      } else if (!line.empty() && line[0] != ':') {
        ADD_FAILURE() << "unexpected SSE line: " << line;
      }
      if (nl == std::string::npos) break;
      lp = nl + 1;
    }
    e.json_data = json::parse(e.data, nullptr, false);
    if (e.json_data.is_discarded()) e.json_data = nullptr;
    out.push_back(std::move(e));
  }
  return out;
}

inline httplib::Headers json_headers() {
  return {{"Content-Type", "application/json"}};
}

}  // namespace hibana::test
