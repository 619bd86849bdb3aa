// HTTP helpers for the server tests: JSON requests through httplib::Client, and a raw socket
// client that can hang up mid-request (cancellation tests).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "server/fake_service.h"
#include "server/server_fixture.h"

namespace hibana::test {

struct Reply {
  int status = 0;
  std::string body;
  httplib::Headers headers;
  json j;  // parsed body (null when not JSON)
  std::string header(const std::string& k) const {
    auto it = headers.find(k);
    return it == headers.end() ? std::string() : it->second;
  }
};

inline Reply post(const TestServer& s, const std::string& path, const std::string& body,
                  httplib::Headers headers = {}, const std::string& type = "application/json") {
  auto c = s.client();
  auto r = c.Post(path.c_str(), headers, body, type.c_str());
  Reply out;
  if (!r) {
    ADD_FAILURE() << "POST " << path << " failed: " << httplib::to_string(r.error());
    return out;
  }
  out.status = r->status;
  out.body = r->body;
  out.headers = r->headers;
  out.j = json::parse(r->body, nullptr, false);
  if (out.j.is_discarded()) out.j = nullptr;
  return out;
}

inline Reply post(const TestServer& s, const std::string& path, const json& body,
                  httplib::Headers headers = {}) {
  return post(s, path, body.dump(), std::move(headers));
}

inline Reply get(const TestServer& s, const std::string& path, httplib::Headers headers = {}) {
  auto c = s.client();
  auto r = c.Get(path.c_str(), headers);
  Reply out;
  if (!r) {
    ADD_FAILURE() << "GET " << path << " failed";
    return out;
  }
  out.status = r->status;
  out.body = r->body;
  out.headers = r->headers;
  out.j = json::parse(r->body, nullptr, false);
  if (out.j.is_discarded()) out.j = nullptr;
  return out;
}

// A client that sends one request over a plain socket, reads up to `read_bytes` of the reply
// (0: nothing) and closes the connection.
inline std::string send_and_hang_up(int port, const std::string& path, const std::string& body,
                                    size_t read_bytes) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    ADD_FAILURE() << "connect failed";
    return {};
  }
  std::string req = "POST " + path +
                    " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    "Content-Length: " +
                    std::to_string(body.size()) + "\r\n\r\n" + body;
  ssize_t sent = send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  EXPECT_EQ(sent, static_cast<ssize_t>(req.size()));
  std::string got;
  char buf[4096];
  while (got.size() < read_bytes) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return got;
}

// Waits up to `timeout` for `cond`.
template <typename F>
bool eventually(F&& cond, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

inline json user_chat(const std::string& text, json extra = json::object()) {
  json j = {{"model", "hibana-tiny"}, {"messages", {{{"role", "user"}, {"content", text}}}}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

inline json user_message(const std::string& text, json extra = json::object()) {
  json j = {{"model", "hibana-tiny"},
            {"max_tokens", 64},
            {"messages", {{{"role", "user"}, {"content", text}}}}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

// A server over a scripted FakeService, fresh for each test.
class HttpApi : public testing::Test {
 protected:
  void SetUp() override {
    fake = std::make_shared<FakeService>(tiny_tokenizer(), 4096);
    server = std::make_unique<TestServer>(fake_model(fake), options);
  }
  void restart(server::ServerOptions o) {
    server.reset();
    options = std::move(o);
    server = std::make_unique<TestServer>(fake_model(fake), options);
  }
  void script(const std::string& text) {
    Script s;
    s.text = text;
    fake->push_script(s);
  }

  server::ServerOptions options;
  std::shared_ptr<FakeService> fake;
  std::unique_ptr<TestServer> server;
};

// A server over the embedded model and the real engine: the model opened once per suite, a
// fresh server per test, and the engine idle again after each test.
class RealEngineTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = server::ServedModel::open(tiny_model_dir(), {"hibana-tiny"}, real_service());
  }
  static void TearDownTestSuite() { model_.reset(); }
  void SetUp() override { server_ = std::make_unique<TestServer>(model_); }
  void TearDown() override {
    server_.reset();
    EXPECT_TRUE(eventually(
        [] {
          auto m = real_service()->metrics();
          return m.running == 0 && m.waiting == 0;
        },
        std::chrono::seconds(30)))
        << "the engine is not idle after the test";
  }

  static inline std::shared_ptr<server::ServedModel> model_;
  std::unique_ptr<TestServer> server_;
};

}  // namespace hibana::test
