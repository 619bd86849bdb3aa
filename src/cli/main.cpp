// hibana: one binary, one subcommand per job.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"

int main(int argc, char** argv) {
  using namespace hibana;
  CLI::App app{"hibana: an inference engine and server for coding agents"};
  app.require_subcommand(1);
  app.fallthrough();
  app.set_version_flag("--version", std::string("hibana ") + HIBANA_VERSION);
  std::string level = "info";
  int threads = 0;
  app.add_option("--log-level", level, "debug, info, warn, error or off");
  app.add_option("--threads", threads, "CPU threads (default: all)");
  cli::Action action;
  cli::add_run_command(app, action);
  cli::add_eval_command(app, action);
  cli::add_info_command(app, action);
  cli::add_bench_command(app, action);
  cli::add_perplexity_command(app, action);
  cli::add_cache_command(app, action);
  cli::add_launch_command(app, action);
  cli::add_template_command(app, action);
  cli::add_tokenize_command(app, action);
  cli::add_detokenize_command(app, action);
  cli::add_serve_command(app, action);
  cli::add_pull_command(app, action);
  cli::add_ls_command(app, action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    set_log_level(parse_log_level(level));
    if (threads > 0) set_default_thread_count(threads);
    return action ? action() : 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.kind() == ErrorKind::invalid_argument ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
