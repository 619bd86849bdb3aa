// Runs a command through the shell and captures its exit status, stdout and stderr.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "support/paths.h"

namespace hibana::test {

struct CommandResult {
  int status = -1;
  std::string out;
  std::string err;
};

inline CommandResult run_command(const std::string& command) {
  static int counter = 0;
  const auto err_path = std::filesystem::temp_directory_path() /
                        ("hibana_cmd_" + std::to_string(::getpid()) + "_" +
                         std::to_string(counter++) + ".err");
  const std::string full = command + " 2>'" + err_path.string() + "'";
  CommandResult r;
  FILE* pipe = ::popen(full.c_str(), "r");
  if (!pipe) return r;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) r.out.append(buffer, n);
  const int status = ::pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  std::filesystem::remove(err_path);
  return r;
}

// `hibana ARGS` with the built binary.
inline CommandResult run_hibana(const std::string& args) {
  return run_command("'" + hibana_binary() + "' " + args);
}

// `hibana ARGS < input`.
inline CommandResult run_hibana(const std::string& args, const std::string& input) {
  static int counter = 0;
  const auto in_path = std::filesystem::temp_directory_path() /
                       ("hibana_cmd_" + std::to_string(::getpid()) + "_" +
                        std::to_string(counter++) + ".in");
  std::ofstream(in_path, std::ios::binary) << input;
  CommandResult r = run_command("'" + hibana_binary() + "' " + args + " < '" + in_path.string() + "'");
  std::filesystem::remove(in_path);
  return r;
}

}  // namespace hibana::test
