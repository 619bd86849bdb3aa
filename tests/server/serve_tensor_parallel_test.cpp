// `hibana serve --tp 2` as a user runs it: the command starts two MPI ranks itself, rank 0
// answers HTTP with the single-rank server's tokens (a returning conversation resumed from the
// prefix cache too), a signal to rank 0 stops every rank cleanly, and a rank that dies ends the
// job instead of leaving the others waiting.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "parallel/communicator.h"
#include "support/paths.h"
#include "support/temp_dir.h"

extern char** environ;

namespace hibana::test {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

template <typename F>
bool eventually(F&& cond, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return cond();
}

// `hibana serve ARGS` as a child process, stderr to a file.
class Server {
 public:
  explicit Server(std::vector<std::string> args) {
    log_ = dir_.file("serve.log");
    std::vector<std::string> argv_s = {hibana_binary(), "serve", "--port",          "0",
                                       "--max-seqs",    "4",     "--kv-cache-size", "64MiB"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Server() {
    if (pid_ > 0 && !exited_) {
      for (pid_t child : children()) kill(child, SIGKILL);
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  void signal_stop() { kill(pid_, SIGTERM); }
  std::string log() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // The first number after `pattern`'s group, once logged (0 if it never is).
  int logged(const std::string& pattern) const {
    int value = 0;
    eventually(
        [&] {
          std::smatch m;
          const std::string l = log();
          if (std::regex_search(l, m, std::regex(pattern))) value = std::stoi(m[1]);
          return value > 0;
        },
        30s);
    return value;
  }
  int port() const { return logged("listening on http://[^:]+:([0-9]+)"); }
  bool ready() const {
    return eventually([&] { return log().find("ready: serving") != std::string::npos; }, 60s);
  }
  // The launcher's children (the ranks, under mpirun).
  std::vector<pid_t> children() const {
    std::vector<pid_t> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
      const std::string name = e.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream in(e.path() / "stat");
      std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const size_t close = stat.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(stat.substr(close + 2));
      char state = 0;
      int ppid = 0;
      rest >> state >> ppid;
      if (ppid == pid_) out.push_back(std::stoi(name));
    }
    return out;
  }
  // Exit status; -1 when killed by a signal or still running after `timeout`.
  int wait(std::chrono::seconds timeout = 30s) {
    int status = 0;
    if (!eventually([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, timeout)) return -1;
    exited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  TempDir dir_;
  std::string log_;
  pid_t pid_ = -1;
  bool exited_ = false;
};

json chat(const std::vector<std::pair<std::string, std::string>>& messages) {
  json m = json::array();
  for (const auto& [role, content] : messages) m.push_back({{"role", role}, {"content", content}});
  return {{"model", "hibana-tiny"}, {"messages", m}, {"max_tokens", 12}, {"temperature", 0}};
}

// Two turns of one conversation: the second resends the first (and its answer), so it resumes
// from the prefix cache. Returns both answers and the second's cached prompt tokens.
struct Answers {
  std::string first, second;
  int64_t cached = 0;
};
Answers converse(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  std::string history;
  for (int i = 0; i < 40; ++i) history += "Line " + std::to_string(i) + " of the build log. ";
  Answers a;
  auto r1 = c.Post("/v1/chat/completions", chat({{"user", history}}).dump(), "application/json");
  EXPECT_TRUE(r1 && r1->status == 200) << (r1 ? r1->body : "no reply");
  if (!r1 || r1->status != 200) return a;
  a.first = json::parse(r1->body)["choices"][0]["message"]["content"];
  auto r2 = c.Post(
      "/v1/chat/completions",
      chat({{"user", history}, {"assistant", a.first}, {"user", "And the next step?"}}).dump(),
      "application/json");
  EXPECT_TRUE(r2 && r2->status == 200) << (r2 ? r2->body : "no reply");
  if (!r2 || r2->status != 200) return a;
  const json j = json::parse(r2->body);
  a.second = j["choices"][0]["message"]["content"];
  a.cached = j["usage"]["prompt_tokens_details"]["cached_tokens"];
  return a;
}

class ServeTensorParallel : public testing::Test {
 protected:
  void SetUp() override {
    if (!mpi_available()) GTEST_SKIP() << "built without MPI";
  }
};

TEST_F(ServeTensorParallel, TwoRanksAnswerAsTheSingleRankServerAndStopOnSigterm) {
  Answers single;
  {
    Server s({});
    ASSERT_GT(s.port(), 0) << s.log();
    ASSERT_TRUE(s.ready()) << s.log();
    single = converse(s.port());
    s.signal_stop();
    EXPECT_EQ(s.wait(), 0) << s.log();
  }
  Server ranks({"--tp", "2"});
  const int port = ranks.port();
  ASSERT_GT(port, 0) << ranks.log();
  ASSERT_TRUE(ranks.ready()) << ranks.log();
  const Answers sharded = converse(port);
  EXPECT_FALSE(single.first.empty());
  EXPECT_EQ(sharded.first, single.first);
  EXPECT_EQ(sharded.second, single.second);
  EXPECT_GT(sharded.cached, 0) << "the returning turn was not resumed from the prefix cache";
  EXPECT_EQ(sharded.cached, single.cached);
  // SIGTERM to rank 0 (its pid is logged): it stops serving and releases the other rank, and
  // the launcher exits 0 with both ranks gone.
  const int rank0 = ranks.logged("rank 0 of 2 ranks, pid ([0-9]+)");
  ASSERT_GT(rank0, 0) << ranks.log();
  kill(rank0, SIGTERM);
  EXPECT_EQ(ranks.wait(), 0) << ranks.log();
  EXPECT_THAT(ranks.log(), testing::HasSubstr("stopping (SIGTERM)"));
}

TEST_F(ServeTensorParallel, ADeadRankEndsTheJob) {
  Server ranks({"--tp", "2"});
  ASSERT_TRUE(ranks.ready()) << ranks.log();
  const int rank0 = ranks.logged("rank 0 of 2 ranks, pid ([0-9]+)");
  std::vector<pid_t> others;
  for (pid_t p : ranks.children())
    if (p != rank0) others.push_back(p);
  ASSERT_EQ(others.size(), 1u) << ranks.log();
  kill(others[0], SIGKILL);
  EXPECT_NE(ranks.wait(), 0) << "the job went on without a rank";
  EXPECT_TRUE(eventually([&] { return kill(rank0, 0) != 0; }, 10s)) << "rank 0 still runs";
}

// The host-RAM and SSD tiers with --tp: each rank keeps its shard's blocks under its own
// DIR/rank-R-of-2; a clean stop writes every rank's blocks to disk, and a restarted server on
// the same directory resumes the conversation from them with the single-rank server's answers.
TEST_F(ServeTensorParallel, RanksKeepTheirStateOnDiskAcrossARestart) {
  Answers single;
  {
    Server s({});
    ASSERT_TRUE(s.ready()) << s.log();
    single = converse(s.port());
    s.signal_stop();
    EXPECT_EQ(s.wait(), 0) << s.log();
  }
  TempDir cache;
  const std::vector<std::string> tiers = {
      "--tp", "2", "--cache-dir", cache.path(), "--host-cache-size", "1MiB"};
  auto blocks = [&](const std::string& dir) {
    int n = 0;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      n += it->path().extension() == ".blk";
    }
    return n;
  };
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(run == 0 ? "first server" : "restarted server");
    Server ranks(tiers);
    ASSERT_TRUE(ranks.ready()) << ranks.log();
    const Answers sharded = converse(ranks.port());
    EXPECT_EQ(sharded.first, single.first);
    EXPECT_EQ(sharded.second, single.second);
    if (run == 1) {  // the first turn's blocks come from disk
      httplib::Client c("127.0.0.1", ranks.port());
      auto m = c.Get("/metrics");
      ASSERT_TRUE(m && m->status == 200);
      std::smatch hit;
      const std::string body = m->body;
      ASSERT_TRUE(std::regex_search(
          body, hit, std::regex("hibana_prefix_cache_ssd_hit_tokens_total\\{[^}]*\\} ([0-9]+)")))
          << body;
      EXPECT_GT(std::stoll(hit[1]), 0) << "the restarted server did not resume from disk";
    }
    const int rank0 = ranks.logged("rank 0 of 2 ranks, pid ([0-9]+)");
    ASSERT_GT(rank0, 0) << ranks.log();
    kill(rank0, SIGTERM);
    EXPECT_EQ(ranks.wait(), 0) << ranks.log();
    EXPECT_GT(blocks(cache.path() + "/rank-0-of-2"), 0);
    EXPECT_EQ(blocks(cache.path() + "/rank-1-of-2"), blocks(cache.path() + "/rank-0-of-2"));
  }
}

// Ctrl-C reaches the launcher (mpirun), which sends SIGTERM to every rank and ends the job: no
// rank may be left behind (mpirun's own status for a signalled job is 1).
TEST_F(ServeTensorParallel, ASignalToTheLauncherEndsEveryRank) {
  Server ranks({"--tp", "2"});
  ASSERT_TRUE(ranks.ready()) << ranks.log();
  const std::vector<pid_t> children = ranks.children();
  ASSERT_EQ(children.size(), 2u) << ranks.log();
  kill(ranks.pid(), SIGINT);
  EXPECT_NE(ranks.wait(), -1) << "the launcher did not exit";
  for (pid_t p : children) {
    EXPECT_TRUE(eventually([&] { return kill(p, 0) != 0; }, 10s)) << "rank " << p << " still runs";
  }
}

}  // namespace
}  // namespace hibana::test
