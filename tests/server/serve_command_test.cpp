// `hibana serve` as a user runs it: listens at once, serves the embedded model, refuses to be
// exposed without a key, reports a model that does not load, stops cleanly on SIGTERM.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "server/auth.h"
#include "server/byte_size.h"
#include "server/http_support.h"
#include "support/paths.h"
#include "support/run_command.h"
#include "support/temp_dir.h"

extern char** environ;

namespace hibana::test {
namespace {

using testing::HasSubstr;

// A `hibana serve` child process whose stderr goes to a file.
class ServeProcess {
 public:
  explicit ServeProcess(std::vector<std::string> args, std::vector<std::string> env = {}) {
    log_ = dir_.file("serve.log");
    std::vector<std::string> argv_s = {hibana_binary(), "serve"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s;
    for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
    env_s.insert(env_s.end(), env.begin(), env.end());
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), envp.data()) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~ServeProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  std::string log() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // True once the log says the model is served ("ready: serving"), within 30 s.
  bool ready() const {
    return eventually([&] { return log().find("ready: serving") != std::string::npos; },
                      std::chrono::seconds(30));
  }
  // The port from "listening on http://HOST:PORT", once logged.
  int port() const {
    int port = 0;
    eventually(
        [&] {
          std::smatch m;
          std::string l = log();
          if (std::regex_search(l, m, std::regex("listening on http://[^:]+:([0-9]+)")))
            port = std::stoi(m[1]);
          return port > 0;
        },
        std::chrono::seconds(20));
    return port;
  }
  // Exit status (-1: killed by a signal or still running after the wait).
  int wait(std::chrono::seconds timeout = std::chrono::seconds(20)) {
    int status = 0;
    bool done = eventually([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, timeout);
    if (!done) return -1;
    exited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  void signal(int sig) { kill(pid_, sig); }

 private:
  TempDir dir_;
  std::string log_;
  pid_t pid_ = -1;
  bool exited_ = false;
};

httplib::Client client(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  return c;
}

// True once the server's /health answers 200 (the model is loaded), within `limit`.
bool healthy(httplib::Client& c, std::chrono::seconds limit = std::chrono::seconds(30)) {
  return eventually(
      [&] {
        auto r = c.Get("/health");
        return r && r->status == 200;
      },
      limit);
}

TEST(ServeCommand, ServesTheEmbeddedModelAndStopsOnSigterm) {
  ServeProcess p({"--port", "0", "--max-seqs", "4", "--kv-cache-size", "64MiB"});
  const int port = p.port();
  ASSERT_GT(port, 0) << p.log();
  auto c = client(port);
  ASSERT_TRUE(healthy(c)) << p.log();
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "hibana-tiny");
  auto chat = c.Post("/v1/chat/completions", user_chat("hi", {{"max_tokens", 4}}).dump(),
                     "application/json");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 200) << chat->body;
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(), 0) << p.log();
  EXPECT_THAT(p.log(), HasSubstr("POST /v1/chat/completions 200 req_"));
  EXPECT_THAT(p.log(), HasSubstr("stopping (SIGTERM)"));
}

TEST(ServeCommand, AKvCacheShorterThanTheContextIsSaidAtStart) {
  // 2 MiB of the embedded model's KV pages hold 640 tokens of its 65536.
  ServeProcess p({"--port", "0", "--kv-cache-size", "2MiB"});
  ASSERT_GT(p.port(), 0) << p.log();
  ASSERT_TRUE(p.ready()) << p.log();
  EXPECT_THAT(p.log(), HasSubstr("the KV cache holds 640 tokens, fewer than the model's context "
                                 "of 65536"));
  EXPECT_THAT(p.log(), HasSubstr("--kv-cache-size 0.2GiB holds one whole context"));
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(), 0) << p.log();
}

TEST(ServeCommand, TheKvCacheIsSizedByDefaultAndTheLogSaysHow) {
  ServeProcess p({"--port", "0", "--max-seqs", "4"});
  ASSERT_GT(p.port(), 0) << p.log();
  ASSERT_TRUE(p.ready()) << p.log();
  // On the CPU the default size; on a GPU its free memory less the reserve.
  EXPECT_THAT(p.log(), HasSubstr("engine: KV cache sized to "));
  EXPECT_THAT(p.log(), HasSubstr("--kv-cache-size sets it"));
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(), 0) << p.log();
}

TEST(ServeCommand, ApiKeyFromTheEnvironmentAndServedName) {
  ServeProcess p({"--port", "0", "--served-model-name", "my-model", "--gpu-cache-size", "64MiB"},
                 {"HIBANA_API_KEY=k1"});
  const int port = p.port();
  ASSERT_GT(port, 0) << p.log();
  auto c = client(port);
  ASSERT_TRUE(healthy(c));
  auto refused = c.Get("/v1/models");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 401);
  auto ok = c.Get("/v1/models", {{"x-api-key", "k1"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(json::parse(ok->body)["data"][0]["id"], "my-model");
  p.signal(SIGINT);
  EXPECT_EQ(p.wait(), 0) << p.log();
}

TEST(ServeCommand, ServesAHubModelByName) {
  // A Hugging Face hub cache holding the embedded model as test-org/tiny.
  TempDir hub;
  namespace fs = std::filesystem;
  const fs::path repo = fs::path(hub.path()) / "models--test-org--tiny";
  fs::create_directories(repo / "snapshots" / "abc123");
  fs::create_directories(repo / "refs");
  std::ofstream(repo / "refs" / "main") << "abc123";
  for (const auto& e : fs::directory_iterator(tiny_model_dir())) {
    fs::create_symlink(e.path(), repo / "snapshots" / "abc123" / e.path().filename());
  }
  ServeProcess p({"test-org/tiny@main", "--port", "0", "--kv-cache-size", "64MiB"},
                 {"HF_HUB_CACHE=" + hub.path()});
  const int port = p.port();
  ASSERT_GT(port, 0) << p.log();
  auto c = client(port);
  ASSERT_TRUE(healthy(c)) << p.log();
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "test-org/tiny");
  auto chat = c.Post("/v1/chat/completions",
                     user_chat("hi", {{"model", "test-org/tiny"}, {"max_tokens", 3}}).dump(),
                     "application/json");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 200) << chat->body;
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(), 0) << p.log();
}

// A serving process killed (SIGKILL) at random points while a device pool of a few pages makes
// every turn spill state to its cache directory: a server started afterwards on that directory
// restores state from it and answers every conversation exactly as a server without a prefix
// cache does.
TEST(ServeCommand, KillNineWhileSpillingNeverRestoresWrongState) {
  TempDir cache;
  auto args = [](std::vector<std::string> extra) {
    std::vector<std::string> a = {"--port",          "0",    "--max-seqs", "2",
                                  "--kv-cache-size", "4MiB", "--exact"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  // Conversation i after `turns` turns: its history, then a new user message.
  auto conversation = [](int i, int turns) {
    json messages = json::array();
    for (int t = 0; t <= turns; ++t) {
      std::string text = "Agent " + std::to_string(i) + " turn " + std::to_string(t) + ":";
      for (int w = 0; w < 60; ++w) text += " item" + std::to_string((w * 13 + i * 7 + t) % 89);
      messages.push_back({{"role", "user"}, {"content", text}});
      if (t < turns) messages.push_back({{"role", "assistant"}, {"content", "Noted."}});
    }
    return json{
        {"model", "hibana-tiny"}, {"messages", messages}, {"max_tokens", 6}, {"temperature", 0}};
  };
  auto ask = [](int port, const json& body) -> std::string {
    auto c = client(port);
    auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
    if (!r || r->status != 200) return "<no answer>";
    return json::parse(r->body)["choices"][0]["message"]["content"].get<std::string>();
  };
  auto metric = [](int port, const std::string& name) {
    auto m = client(port).Get("/metrics");
    std::smatch v;
    if (!m || !std::regex_search(m->body, v, std::regex(name + "(\\{[^}]*\\})? ([0-9.e+]+)"))) {
      return -1.0;
    }
    return std::stod(v[2]);
  };
  auto ready = [](int port) {
    auto c = client(port);
    return healthy(c, std::chrono::seconds(60));
  };
  for (int round = 0; round < 4; ++round) {
    ServeProcess p(args({"--cache-dir", cache.path()}));
    const int port = p.port();
    ASSERT_GT(port, 0) << p.log();
    ASSERT_TRUE(ready(port)) << p.log();
    // Each round has four new conversations that together need more than the pool: new state
    // is spilled in every round, whatever the timing of the kill below.
    const int first = 4 * round;
    for (int i = first; i < first + 4; ++i) {
      ASSERT_NE(ask(port, conversation(i, 3)), "<no answer>") << p.log();
    }
    EXPECT_GT(metric(port, "hibana_ssd_spilled_bytes_total"), 0.0) << "round " << round;
    std::atomic<bool> stop{false};
    std::thread agents([&] {
      for (int k = 0; !stop; ++k) ask(port, conversation(first + k % 4, std::min(3, k / 4)));
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(700 + 450 * round));
    p.signal(SIGKILL);
    stop = true;
    agents.join();
    EXPECT_EQ(p.wait(), -1) << "round " << round;
  }
  ServeProcess cached(args({"--cache-dir", cache.path()}));
  ServeProcess plain(args({"--no-prefix-cache"}));
  const int cached_port = cached.port(), plain_port = plain.port();
  ASSERT_TRUE(ready(cached_port)) << cached.log();
  ASSERT_TRUE(ready(plain_port)) << plain.log();
  for (int turns = 0; turns < 4; ++turns) {
    for (int i : {0, 5, 10, 15}) {  // a conversation of each round
      const std::string want = ask(plain_port, conversation(i, turns));
      ASSERT_NE(want, "<no answer>") << plain.log();
      EXPECT_EQ(ask(cached_port, conversation(i, turns)), want)
          << "conversation " << i << " after " << turns << " turns";
    }
  }
  EXPECT_GT(metric(cached_port, "hibana_prefix_cache_ssd_hit_tokens_total"), 0.0)
      << "nothing was restored from the cache directory";
}

TEST(ServeCommand, RefusesAnExposedAddressWithoutAKey) {
  auto r = run_hibana("serve --host 0.0.0.0 --port 0");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--api-key"));
  EXPECT_THAT(r.err, HasSubstr("--insecure-no-auth"));
}

TEST(ServeCommand, ReportsAModelThatFailsToLoad) {
  TempDir empty;
  ServeProcess p({empty.path(), "--port", "0"});
  EXPECT_NE(p.wait(), 0);
  EXPECT_THAT(p.log(), HasSubstr("error: "));
}

// Dummy weights (a config's shapes, for benchmarks) come with no tokenizer: serve says to give
// --tokenizer, and with one it serves chat from that directory's tokenizer and template.
TEST(ServeCommand, DummyWeightsServeWithTheTokenizerGiven) {
  const std::string config = tiny_model_dir() + "/config.json";
  auto refused = run_hibana("serve --port 0 --load-format dummy --config " + config);
  EXPECT_EQ(refused.status, 2);
  EXPECT_THAT(refused.err, HasSubstr("--tokenizer DIR"));
  ServeProcess p({"--port", "0", "--load-format", "dummy", "--config", config, "--tokenizer",
                  tiny_model_dir(), "--kv-cache-size", "64MiB", "--max-seqs", "2"});
  const int port = p.port();
  ASSERT_GT(port, 0) << p.log();
  auto c = client(port);
  ASSERT_TRUE(healthy(c)) << p.log();
  auto chat = c.Post("/v1/chat/completions",
                     user_chat("hi", {{"max_tokens", 4}, {"ignore_eos", true}}).dump(),
                     "application/json");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 200) << chat->body;
  EXPECT_EQ(json::parse(chat->body)["usage"]["completion_tokens"], 4) << chat->body;
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(), 0) << p.log();
}

TEST(ServeCommand, BadSizesAreRefused) {
  auto r = run_hibana("serve --port 0 --kv-cache-size lots");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.err, HasSubstr("--kv-cache-size"));
}

TEST(ByteSize, Units) {
  using server::parse_byte_size;
  EXPECT_EQ(parse_byte_size("1048576", "x"), 1048576);
  EXPECT_EQ(parse_byte_size("512MiB", "x"), int64_t(512) << 20);
  EXPECT_EQ(parse_byte_size("8GiB", "x"), int64_t(8) << 30);
  EXPECT_EQ(parse_byte_size("64M", "x"), int64_t(64) << 20);
  EXPECT_EQ(parse_byte_size("2GB", "x"), int64_t(2000000000));
  EXPECT_EQ(parse_byte_size("1.5k", "x"), 1536);
  EXPECT_EQ(parse_byte_size("100 b", "x"), 100);
  for (const char* bad : {"", "MiB", "12XB", "-5", "1e3", "5 GiBs"}) {
    EXPECT_THROW(parse_byte_size(bad, "x"), Error) << bad;
  }
}

TEST(Auth, LoopbackHosts) {
  using server::is_loopback_host;
  for (const char* h :
       {"127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "::ffff:127.0.0.1"}) {
    EXPECT_TRUE(is_loopback_host(h)) << h;
  }
  for (const char* h : {"0.0.0.0", "::", "192.168.1.2", "10.0.0.1", "example.com"}) {
    EXPECT_FALSE(is_loopback_host(h)) << h;
  }
}

TEST(Auth, KeysFromEitherHeader) {
  using server::authorized;
  EXPECT_TRUE(authorized({}, "", ""));
  EXPECT_TRUE(authorized({"k"}, "Bearer k", ""));
  EXPECT_TRUE(authorized({"k"}, "bearer   k  ", ""));
  EXPECT_TRUE(authorized({"k"}, "", "k"));
  EXPECT_TRUE(authorized({"a", "k"}, "", "k"));
  EXPECT_FALSE(authorized({"k"}, "", ""));
  EXPECT_FALSE(authorized({"k"}, "Bearer kk", ""));
  EXPECT_FALSE(authorized({"k"}, "Basic k", ""));
  EXPECT_FALSE(authorized({"k"}, "Bearerk", ""));
  EXPECT_FALSE(authorized({"key"}, "", "ke"));
  EXPECT_TRUE(server::route_needs_key("/v1/messages"));
  EXPECT_FALSE(server::route_needs_key("/health"));
}

}  // namespace
}  // namespace hibana::test
