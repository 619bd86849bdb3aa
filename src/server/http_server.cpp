#include "server/http_server.h"

#include <httplib.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "server/anthropic_messages.h"
#include "server/api_error.h"
#include "server/auth.h"
#include "server/connection_probe.h"
#include "server/metrics.h"
#include "server/model_list.h"
#include "server/openai_chat.h"
#include "server/openai_common.h"
#include "server/openai_completions.h"
#include "server/openai_responses.h"

namespace hibana::server {

namespace {

using ApiHandler = ApiResponse (*)(const ServedModel&, const RequestContext&, std::string_view);

constexpr auto kStreamPoll = std::chrono::milliseconds(200);

ApiFamily family_of(const std::string& path) {
  return path.rfind("/v1/messages", 0) == 0 || path.rfind("/messages", 0) == 0
             ? ApiFamily::anthropic
             : ApiFamily::openai;
}

bool is_json_content_type(const std::string& type) {
  if (type.empty()) return true;  // curl -d without -H, some minimal clients
  std::string t;
  for (char c : type) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return t.find("json") != std::string::npos;
}

// cpp-httplib 0.11 listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled into
// Debian's library): a burst of agents connecting at once would see connections dropped or
// reset. Listening again on the bound socket raises the backlog (the kernel caps it at
// net.core.somaxconn).
class BacklogServer : public httplib::Server {
 public:
  void raise_backlog(int backlog) {
    const socket_t sock = svr_sock_;
    if (sock != INVALID_SOCKET) ::listen(sock, backlog);
  }
};

}  // namespace

struct HttpServer::Impl {
  explicit Impl(ServerOptions o)
      : options(std::move(o)),
        responses(options.stored_responses.max_responses > 0
                      ? std::make_shared<ResponseStore>(options.stored_responses)
                      : nullptr) {}

  ServerOptions options;
  std::shared_ptr<ResponseStore> responses;
  BacklogServer server;
  std::thread thread;
  int port = 0;
  std::atomic<bool> stopping{false};
  HttpStats stats;

  mutable std::mutex mutex;
  std::shared_ptr<const ServedModel> model;
  std::string failure;

  std::shared_ptr<const ServedModel> current() const {
    std::lock_guard<std::mutex> lock(mutex);
    return model;
  }

  // 503 until the model is ready, with the reason.
  ApiError unavailable() const {
    std::lock_guard<std::mutex> lock(mutex);
    return ApiError(503, failure.empty() ? "Loading model" : failure);
  }

  static std::string request_id(const httplib::Response& res) {
    return res.get_header_value("request-id");
  }

  void send_error(httplib::Response& res, ApiFamily family, const ApiError& e,
                  const std::string& rid) {
    res.status = e.status();
    res.set_content(error_body(family, e, rid), "application/json");
  }

  bool cors_allowed(const std::string& origin) const {
    for (const auto& o : options.cors_origins) {
      if (o == "*" || o == origin) return true;
    }
    return false;
  }

  httplib::Server::HandlerResponse pre_route(const httplib::Request& req, httplib::Response& res) {
    const std::string rid = random_id("req_");
    res.set_header("request-id", rid);
    res.set_header("x-request-id", rid);
    const std::string origin = req.get_header_value("Origin");
    const bool cors = !origin.empty() && cors_allowed(origin);
    if (cors) {
      res.set_header("Access-Control-Allow-Origin", origin);
      res.set_header("Vary", "Origin");
      res.set_header("Access-Control-Expose-Headers", "request-id, x-request-id");
    }
    if (req.method == "OPTIONS") {
      if (!cors) return httplib::Server::HandlerResponse::Unhandled;  // 404 below
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
      res.set_header("Access-Control-Allow-Headers",
                     "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta, "
                     "x-stainless-os, x-stainless-lang, x-stainless-package-version, "
                     "x-stainless-runtime, x-stainless-runtime-version, x-stainless-arch, "
                     "x-stainless-retry-count, x-stainless-timeout, "
                     "anthropic-dangerous-direct-browser-access");
      res.set_header("Access-Control-Max-Age", "600");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (route_needs_key(req.path) &&
        !authorized(options.api_keys, req.get_header_value("Authorization"),
                    req.get_header_value("x-api-key"))) {
      send_error(res, family_of(req.path),
                 ApiError(401,
                          "invalid or missing API key: send it as 'Authorization: Bearer KEY' or "
                          "'x-api-key: KEY'",
                          "invalid_api_key"),
                 rid);
      // The body was not read: the connection cannot carry another request.
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  }

  // Errors cpp-httplib produces itself (no route, body too large, malformed request), in the
  // API's shape. Responses that already have a body are left alone.
  httplib::Server::HandlerResponse on_error(const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.content_provider_) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    std::string message;
    std::string code;
    int status = res.status;
    if (status == 404) {
      message = "not found: " + req.method + " " + req.path;
      code = "not_found";
    } else if (status == 413) {
      if (req.get_header_value("Content-Type").find("x-www-form-urlencoded") != std::string::npos) {
        status = 415;
        message = "the request body must be JSON (Content-Type: application/json)";
      } else {
        message = "the request body is larger than the limit of " +
                  std::to_string(options.max_body_bytes) + " bytes (--max-body-size)";
        code = "request_too_large";
      }
    } else if (status == 400) {
      message = "malformed HTTP request";
    } else {
      message = "HTTP error " + std::to_string(status);
    }
    std::string rid = request_id(res);
    if (rid.empty()) {  // refused before routing (a malformed request line or header)
      rid = random_id("req_");
      res.set_header("request-id", rid);
      res.set_header("x-request-id", rid);
    }
    send_error(res, family_of(req.path), ApiError(status, message, code), rid);
    return httplib::Server::HandlerResponse::Handled;
  }

  void api(const httplib::Request& req, httplib::Response& res, ApiHandler handler) {
    const ApiFamily family = family_of(req.path);
    const std::string rid = request_id(res);
    try {
      std::shared_ptr<const ServedModel> m = current();
      if (!m) throw unavailable();
      if (!is_json_content_type(req.get_header_value("Content-Type"))) {
        throw ApiError(415, "the request body must be JSON (Content-Type: application/json)");
      }
      auto probe = std::make_shared<ConnectionProbe>(req.local_addr, req.local_port,
                                                     req.remote_addr, req.remote_port);
      RequestContext ctx;
      ctx.request_id = rid;
      ctx.header = [&req](const std::string& name) { return req.get_header_value(name); };
      ctx.client_gone = [this, probe] { return stopping.load() || probe->closed(); };
      ctx.responses = responses;
      ApiResponse r = handler(*m, ctx, req.body);
      res.status = r.status;
      if (!r.stream) {
        res.set_content(r.body, r.content_type);
        return;
      }
      res.set_header("Cache-Control", "no-cache");
      // The model stays alive while its streams run.
      std::shared_ptr<StreamBody> body(std::move(r.stream));
      res.set_chunked_content_provider(
          r.content_type,  // exactly "text/event-stream": cpp-httplib never compresses it
          [this, body, probe, m](size_t, httplib::DataSink& sink) {
            std::string out;
            const bool more = body->next(out, SteadyClock::now() + kStreamPoll);
            if (!out.empty() && !sink.write(out.data(), out.size())) {
              body->abandon();
              return false;
            }
            if (!more) {
              sink.done();
              return true;
            }
            if (stopping.load() || (out.empty() && probe->closed())) {
              body->abandon();
              return false;
            }
            return true;
          },
          [body](bool success) {
            if (!success) body->abandon();
          });
    } catch (const std::exception& e) {
      ApiError err = to_api_error(e);
      if (err.status() >= 500) {
        log_error(req.method, " ", req.path, " ", rid, ": ", err.what());
      } else {
        log_info(req.method, " ", req.path, " ", rid, ": ", err.status(), " ", err.what());
      }
      send_error(res, family, err, rid);
    }
  }

  void routes() {
    auto post = [this](const std::string& path, ApiHandler handler) {
      auto h = [this, handler](const httplib::Request& req, httplib::Response& res) {
        api(req, res, handler);
      };
      server.Post("/v1" + path, h);
      server.Post(path, h);
    };
    post("/chat/completions", &handle_chat_completions);
    post("/completions", &handle_completions);
    post("/responses", &handle_responses);
    post("/messages", &handle_messages);
    post("/messages/count_tokens", &handle_count_tokens);

    auto models = [this](const httplib::Request& req, httplib::Response& res) {
      const std::string rid = request_id(res);
      try {
        std::shared_ptr<const ServedModel> m = current();
        if (!m) throw unavailable();
        if (req.matches.size() > 1) {
          res.set_content(model_json(*m, req.matches[1].str()), "application/json");
        } else {
          res.set_content(model_list_json(*m), "application/json");
        }
      } catch (const std::exception& e) {
        send_error(res, ApiFamily::openai, to_api_error(e), rid);
      }
    };
    for (const char* p : {"/v1/models", "/models", R"(/v1/models/(.+))", R"(/models/(.+))"}) {
      server.Get(p, models);
    }

    using StoredHandler = ApiResponse (*)(ResponseStore*, const std::string&);
    auto stored = [this](StoredHandler handler) {
      return [this, handler](const httplib::Request& req, httplib::Response& res) {
        try {
          ApiResponse r = handler(responses.get(), req.matches[1].str());
          res.set_content(r.body, r.content_type);
        } catch (const std::exception& e) {
          send_error(res, ApiFamily::openai, to_api_error(e), request_id(res));
        }
      };
    };
    for (const char* p : {R"(/v1/responses/([^/]+))", R"(/responses/([^/]+))"}) {
      server.Get(p, stored(&get_stored_response));
      server.Delete(p, stored(&delete_stored_response));
    }

    server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (current()) {
        res.set_content(R"({"status":"ok"})", "application/json");
        return;
      }
      ApiError e = unavailable();
      res.status = 503;
      res.set_content(
          dump(Json{{"error",
                     Json{{"code", 503}, {"message", e.what()}, {"type", "unavailable_error"}}}}),
          "application/json");
    });
    server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      std::shared_ptr<const ServedModel> m = current();
      EngineMetrics em;
      if (m) em = m->service->metrics();
      res.set_content(prometheus_text(m ? &em : nullptr, m ? m->names.front() : std::string(),
                                      stats.snapshot()),
                      "text/plain; version=0.0.4");
    });
    server.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("hibana is running\n", "text/plain");
    });
  }
};

HttpServer::HttpServer(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {
  Impl& m = *impl_;
  httplib::Server& s = m.server;
  const int threads = std::max(4, m.options.threads);
  // cpp-httplib owns the queue it is given (its API takes a raw pointer).
  s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s.set_payload_max_length(m.options.max_body_bytes);
  s.set_keep_alive_max_count(1000);
  s.set_keep_alive_timeout(5);
  s.set_read_timeout(60);
  s.set_write_timeout(60);
  s.set_tcp_nodelay(true);
  s.set_pre_routing_handler(httplib::Server::HandlerWithResponse(
      [&m](const httplib::Request& req, httplib::Response& res) { return m.pre_route(req, res); }));
  s.set_error_handler(httplib::Server::HandlerWithResponse(
      [&m](const httplib::Request& req, httplib::Response& res) { return m.on_error(req, res); }));
  s.set_exception_handler(
      [&m](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        log_error(req.method, " ", req.path, ": ", what);
        m.send_error(res, family_of(req.path), ApiError(500, "internal error: " + what),
                     Impl::request_id(res));
      });
  s.set_logger([&m](const httplib::Request& req, const httplib::Response& res) {
    m.stats.count(res.status);
    if (req.path == "/health" || req.path == "/metrics") {
      log_debug(req.method, " ", req.path, " ", res.status);
    } else {
      log_info(req.method, " ", req.path, " ", res.status, " ", Impl::request_id(res));
    }
  });
  m.routes();
}

HttpServer::~HttpServer() {
  stop();
}

int HttpServer::start() {
  Impl& m = *impl_;
  // cpp-httplib sends without MSG_NOSIGNAL: a write to a closed connection must fail, not
  // kill the process.
  std::signal(SIGPIPE, SIG_IGN);
  int port = m.options.port;
  if (port == 0) {
    port = m.server.bind_to_any_port(m.options.host);
    if (port <= 0) {
      throw Error(ErrorKind::io,
                  "cannot listen on " + m.options.host + ": " + std::strerror(errno));
    }
  } else if (!m.server.bind_to_port(m.options.host, port)) {
    throw Error(ErrorKind::io, "cannot listen on " + m.options.host + ":" + std::to_string(port) +
                                   ": " + std::strerror(errno));
  }
  m.port = port;
  m.server.raise_backlog(4096);
  m.thread = std::thread([&m] { m.server.listen_after_bind(); });
  // cpp-httplib's stop() does nothing until the listening loop has started: wait for it, so a
  // stop() right after start() cannot be lost.
  while (!m.server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return port;
}

void HttpServer::set_model(std::shared_ptr<const ServedModel> model) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->model = std::move(model);
}

void HttpServer::set_failed(const std::string& message) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->failure = message;
}

void HttpServer::stop() {
  Impl& m = *impl_;
  m.stopping.store(true);
  m.server.stop();
  if (m.thread.joinable()) m.thread.join();
}

int HttpServer::port() const {
  return impl_->port;
}

}  // namespace hibana::server
