// hibana launch claude|codex|opencode: starts a coding agent pointed at a local hibana server
// (starting the server first when none answers), with the switches that keep the agent from
// calling its vendor, and passes the remaining arguments through (`-- -p "..."` is headless).
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <httplib.h>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"

extern char** environ;

namespace hibana::cli {

namespace {

namespace fs = std::filesystem;

struct LaunchArgs {
  std::string agent;
  std::string model;  // served model name (default: what the server lists) or, when the server
                      // has to be started, the model it should serve
  std::string host = "127.0.0.1";
  int port = 30001;
  std::string api_key;
  bool no_start = false;
  std::vector<std::string> passthrough;
};

struct AgentInfo {
  const char* binary;
  const char* package;  // npm package that installs it
};

const std::map<std::string, AgentInfo>& agents() {
  static const std::map<std::string, AgentInfo> a = {
      {"claude", {"claude", "@anthropic-ai/claude-code"}},
      {"codex", {"codex", "@openai/codex"}},
      {"opencode", {"opencode", "opencode-ai"}},
  };
  return a;
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    fs::path candidate = fs::path(p.substr(start, end - start)) / name;
    std::error_code ec;
    if (!candidate.empty() && fs::is_regular_file(candidate, ec) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate.string();
    }
    start = end + 1;
  }
  return "";
}

std::string find_agent(const std::string& agent) {
  const AgentInfo& info = agents().at(agent);
  std::string found = find_on_path(info.binary);
  if (!found.empty()) return found;
  if (agent == "claude") {
    if (const char* home = std::getenv("HOME")) {
      fs::path local = fs::path(home) / ".claude/local/claude";
      if (::access(local.c_str(), X_OK) == 0) return local.string();
    }
  }
  throw Error(ErrorKind::not_found,
              std::string(info.binary) + " is not installed (not on PATH). Install it with:\n  npm install -g " +
                  info.package + "\nthen run this command again.");
}

// The server's /health status, or 0 when nothing answers.
int health(const LaunchArgs& a) {
  httplib::Client client(a.host, a.port);
  client.set_connection_timeout(1, 0);
  client.set_read_timeout(5, 0);
  auto res = client.Get("/health");
  return res ? res->status : 0;
}

std::string served_model_name(const LaunchArgs& a) {
  httplib::Client client(a.host, a.port);
  client.set_read_timeout(10, 0);
  httplib::Headers headers;
  if (!a.api_key.empty()) headers.emplace("Authorization", "Bearer " + a.api_key);
  auto res = client.Get("/v1/models", headers);
  if (!res || res->status != 200) {
    throw Error(ErrorKind::io, "the server at " + a.host + ":" + std::to_string(a.port) +
                                   " did not list its models" +
                                   (res ? " (HTTP " + std::to_string(res->status) + ")" : ""));
  }
  auto j = nlohmann::json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || j["data"].empty()) {
    throw Error(ErrorKind::io, "the server's model list is empty or malformed");
  }
  return j["data"][0].value("id", std::string("hibana"));
}

pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
            const std::string& output_file) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  for (const std::string& kv : extra_env) {
    const std::string key = kv.substr(0, kv.find('=') + 1);
    env.erase(std::remove_if(env.begin(), env.end(),
                             [&](const std::string& s) { return s.rfind(key, 0) == 0; }),
              env.end());
    env.push_back(kv);
  }
  std::vector<char*> cargv, cenv;
  for (const auto& s : argv) cargv.push_back(const_cast<char*>(s.c_str()));
  cargv.push_back(nullptr);
  for (const auto& s : env) cenv.push_back(const_cast<char*>(s.c_str()));
  cenv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (!output_file.empty()) {
    posix_spawn_file_actions_addopen(&actions, 1, output_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  }
  pid_t pid = 0;
  int rc = posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    throw Error(ErrorKind::io, "could not start " + argv[0] + ": " + std::strerror(rc));
  }
  return pid;
}

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Starts `hibana serve` in the background and waits until it is healthy.
pid_t start_server(const LaunchArgs& a) {
  std::vector<std::string> argv = {fs::read_symlink("/proc/self/exe").string(), "serve"};
  if (!a.model.empty()) argv.push_back(a.model);
  argv.insert(argv.end(), {"--host", a.host, "--port", std::to_string(a.port)});
  if (!a.api_key.empty()) argv.insert(argv.end(), {"--api-key", a.api_key});
  const std::string log = (fs::temp_directory_path() / ("hibana-launch-" + std::to_string(::getpid()) + ".log")).string();
  std::fprintf(stderr, "hibana: no server on %s:%d; starting one (log: %s)\n", a.host.c_str(),
               a.port, log.c_str());
  pid_t pid = spawn(argv, {}, log);
  const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (std::chrono::steady_clock::now() < until) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      throw Error(ErrorKind::io, "the server exited while starting; see " + log);
    }
    if (health(a) == 200) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  ::kill(pid, SIGTERM);
  throw Error(ErrorKind::timeout, "the server did not become healthy within 5 minutes; see " + log);
}

// The agent's command line and environment.
void agent_setup(const LaunchArgs& a, const std::string& model, std::vector<std::string>& argv,
                 std::vector<std::string>& env) {
  const std::string base = "http://" + a.host + ":" + std::to_string(a.port);
  const std::string key = a.api_key.empty() ? "hibana-local" : a.api_key;
  if (a.agent == "claude") {
    env = {"ANTHROPIC_BASE_URL=" + base, "ANTHROPIC_AUTH_TOKEN=" + key, "ANTHROPIC_API_KEY=",
           "ANTHROPIC_MODEL=" + model, "ANTHROPIC_DEFAULT_OPUS_MODEL=" + model,
           "ANTHROPIC_DEFAULT_SONNET_MODEL=" + model, "ANTHROPIC_DEFAULT_HAIKU_MODEL=" + model,
           "ANTHROPIC_SMALL_FAST_MODEL=" + model, "CLAUDE_CODE_SUBAGENT_MODEL=" + model,
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1",
           "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1"};
    argv.insert(argv.end(), {"--model", model});
  } else if (a.agent == "codex") {
    // Codex speaks only the Responses API; -c overrides avoid touching ~/.codex/config.toml.
    env = {"HIBANA_API_KEY=" + key};
    for (const std::string& c : std::vector<std::string>{
             "model_provider=\"hibana\"", "model_providers.hibana.name=\"hibana\"",
          "model_providers.hibana.base_url=\"" + base + "/v1\"",
          "model_providers.hibana.env_key=\"HIBANA_API_KEY\"",
          "model_providers.hibana.wire_api=\"responses\"", "model=\"" + model + "\""}) {
      argv.insert(argv.end(), {"-c", c});
    }
  } else {  // opencode: a provider in a generated config file
    nlohmann::json cfg = {
        {"$schema", "https://opencode.ai/config.json"},
        {"provider",
         {{"hibana",
           {{"npm", "@ai-sdk/openai-compatible"},
            {"name", "hibana"},
            {"options", {{"baseURL", base + "/v1"}, {"apiKey", key}}},
            {"models", {{model, {{"name", model}}}}}}}}},
        {"model", "hibana/" + model}};
    const fs::path file = fs::temp_directory_path() / ("hibana-opencode-" + std::to_string(::getpid()) + ".json");
    std::ofstream(file) << cfg.dump(2);
    env = {"OPENCODE_CONFIG=" + file.string(), "OPENCODE_DISABLE_MODELS_FETCH=1",
           "OPENCODE_DISABLE_AUTOUPDATE=1"};
  }
}

int run_launch(const LaunchArgs& a) {
  if (!agents().count(a.agent)) {
    throw Error(ErrorKind::invalid_argument, "unknown agent '" + a.agent + "' (claude, codex or opencode)");
  }
  const std::string binary = find_agent(a.agent);
  pid_t server = -1;
  int h = health(a);
  if (h == 0) {
    if (a.no_start) {
      throw Error(ErrorKind::not_found, "no hibana server answers on " + a.host + ":" +
                                            std::to_string(a.port) + " (start one with `hibana serve`)");
    }
    server = start_server(a);
  } else {
    while (h == 503) {  // still loading
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      h = health(a);
    }
  }
  std::string model = served_model_name(a);
  std::vector<std::string> argv = {binary}, env;
  agent_setup(a, model, argv, env);
  argv.insert(argv.end(), a.passthrough.begin(), a.passthrough.end());
  log_info("launching ", binary, " against http://", a.host, ":", a.port, " (model ", model, ")");
  // Ctrl-C goes to the agent (same process group); we only wait for it.
  struct sigaction ignore {}, old_int {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ignore, &old_int);
  int code = wait_for(spawn(argv, env, ""));
  sigaction(SIGINT, &old_int, nullptr);
  if (server > 0) {
    ::kill(server, SIGTERM);
    wait_for(server);
  }
  return code;
}

}  // namespace

void add_launch_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<LaunchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "launch", "start a coding agent (claude, codex, opencode) against the local server");
  cmd->add_option("agent", args->agent, "claude, codex or opencode")->required();
  cmd->add_option("--model", args->model,
                  "model to serve when a server has to be started (default: the embedded one)");
  cmd->add_option("--host", args->host, "server address (default 127.0.0.1)");
  cmd->add_option("--port", args->port, "server port (default 30001)");
  cmd->add_option("--api-key", args->api_key, "the server's API key, if it has one");
  cmd->add_flag("--no-start", args->no_start, "fail instead of starting a server");
  cmd->add_option("args", args->passthrough, "arguments for the agent, after --");
  cmd->allow_extras(false);
  cmd->callback([&action, args] { action = [args] { return run_launch(*args); }; });
}

}  // namespace hibana::cli
