// The HTTP server: routes, authentication, CORS, request ids, body limits, errors in each
// API's shape, health while the model loads, and streaming responses that stop the generation
// when the client goes away. Built on cpp-httplib (a thread per connection from a pool).
//
// Routes (each /v1 route also answers without the /v1 prefix):
//   GET  /                          200 "hibana is running" (reachability probes)
//   GET  /health                    200 {"status":"ok"}; 503 while loading or after a failure
//   GET  /metrics                   Prometheus text
//   GET  /v1/models, /v1/models/ID
//   POST /v1/chat/completions, /v1/completions, /v1/responses     OpenAI
//   GET, DELETE /v1/responses/ID                                  stored Responses API responses
//   POST /v1/messages, /v1/messages/count_tokens                  Anthropic
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "server/response_store.h"
#include "server/served_model.h"

namespace hibana::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 30001;                   // 0: any free port
  std::vector<std::string> api_keys;  // empty: no authentication
  size_t max_body_bytes = size_t(64) << 20;
  std::vector<std::string> cors_origins;  // empty: no CORS headers; "*": any origin
  int threads = 256;                      // connections served at once (one thread each)
  // Responses API responses kept for previous_response_id (max_responses 0: none).
  ResponseStoreLimits stored_responses;
};

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts serving on a background thread; returns the bound port. Until
  // set_model(), /health and the APIs answer 503 "Loading model". Throws Error(io) when the
  // address cannot be bound. Ignores SIGPIPE for the whole process: cpp-httplib writes to
  // sockets without MSG_NOSIGNAL, and a client that disconnects must not kill the server.
  int start();
  void set_model(std::shared_ptr<const ServedModel> model);
  // The model could not be loaded: /health and the APIs answer 503 with this message.
  void set_failed(const std::string& message);
  // Stops accepting, ends open streams (their generations are cancelled) and waits for the
  // connection threads.
  void stop();
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hibana::server
