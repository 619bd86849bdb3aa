// Each subcommand of `hibana` registers itself on the CLI11 app.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace hibana::cli {

// A registered command's action; runs after parsing when its subcommand was chosen.
using Action = std::function<int()>;

void add_run_command(CLI::App& app, Action& action);
void add_eval_command(CLI::App& app, Action& action);
void add_info_command(CLI::App& app, Action& action);
void add_bench_command(CLI::App& app, Action& action);
void add_bench_matmul_command(CLI::App& bench, Action& action);
void add_perplexity_command(CLI::App& app, Action& action);
void add_cache_command(CLI::App& app, Action& action);
void add_launch_command(CLI::App& app, Action& action);
void add_template_command(CLI::App& app, Action& action);
void add_tokenize_command(CLI::App& app, Action& action);
void add_detokenize_command(CLI::App& app, Action& action);
void add_serve_command(CLI::App& app, Action& action);
void add_pull_command(CLI::App& app, Action& action);
void add_ls_command(CLI::App& app, Action& action);

}  // namespace hibana::cli
