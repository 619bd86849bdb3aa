// hibana pull ORG/NAME[@REVISION]: downloads a model from the Hugging Face hub into its local
// cache (the one `hf download` fills), refusing before the weights move what hibana cannot run.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/byte_text.h"
#include "core/error.h"
#include "io/hub.h"
#include "model/config.h"

namespace hibana::cli {

namespace {

struct PullArgs {
  std::string model;
  std::string revision;
  std::vector<std::string> include;
  std::string cache_dir;
  int jobs = 4;
  bool force = false;
};

// Progress on stderr: a line rewritten in place on a terminal, one every 10 s otherwise.
class ProgressPrinter {
 public:
  void operator()(const HubProgress& p) {
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - last_).count();
    if (!tty_ && dt < 10) return;
    const double rate =
        last_bytes_
            ? std::max(0.0, (double(p.bytes_done) - double(last_bytes_)) / std::max(dt, 1e-3))
            : 0;
    last_ = now;
    last_bytes_ = p.bytes_done;
    std::string eta;
    if (rate > 0 && p.bytes_total > p.bytes_done) {
      const long s = static_cast<long>((p.bytes_total - p.bytes_done) / rate);
      eta = "  " + std::to_string(s / 60) + "m" + std::to_string(s % 60) + "s left";
    }
    const double pct = p.bytes_total ? 100.0 * p.bytes_done / p.bytes_total : 100.0;
    std::fprintf(stderr, "%s%s / %s (%.0f%%)  %s/s  files %zu/%zu%s  %s%s", tty_ ? "\r" : "",
                 byte_text(p.bytes_done).c_str(), byte_text(p.bytes_total).c_str(), pct,
                 byte_text(rate).c_str(), p.files_done, p.files_total, eta.c_str(),
                 p.current.c_str(), tty_ ? "\033[K" : "\n");
    std::fflush(stderr);
    printed_ = true;
  }
  void finish() {
    if (tty_ && printed_) std::fprintf(stderr, "\n");
  }

 private:
  bool tty_ = ::isatty(2) != 0;
  bool printed_ = false;
  uint64_t last_bytes_ = 0;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

int pull(const PullArgs& a) {
  HubPullOptions o;
  HubRef ref = parse_hub_ref(a.model);
  o.repo = std::move(ref.repo);
  o.revision = std::move(ref.revision);
  if (!a.revision.empty()) o.revision = a.revision;
  o.include = a.include;
  o.cache_dir = a.cache_dir;
  check(a.jobs > 0, ErrorKind::invalid_argument, "--jobs must be positive");
  o.jobs = a.jobs;
  if (!a.force && a.include.empty()) {
    o.check_config = [&o](const std::string& text) {
      try {
        parse_model_config(text, o.repo + "/config.json");
      } catch (const Error& e) {
        throw Error(e.kind(), std::string(e.what()) +
                                  " -- nothing else was downloaded (--force downloads it anyway)");
      }
    };
  }
  ProgressPrinter printer;
  o.progress = [&printer](const HubProgress& p) { printer(p); };
  o.started = [&o](const HubProgress& p, const std::string& commit) {
    const uint64_t left = p.bytes_total - p.bytes_done;
    std::fprintf(stderr, "pulling %s@%s (commit %.12s): %zu files, %s to download into %s\n",
                 o.repo.c_str(), o.revision.c_str(), commit.c_str(), p.files_total,
                 byte_text(static_cast<double>(left)).c_str(),
                 (o.cache_dir.empty() ? hub_cache_dir() : o.cache_dir).c_str());
  };
  HubPullResult r;
  try {
    r = hub_pull(o);
  } catch (...) {
    printer.finish();
    throw;
  }
  printer.finish();
  uint64_t total = 0;
  for (const auto& f : r.files) total += f.size;
  if (r.files_downloaded == 0) {
    std::printf("%s is up to date (commit %.12s, %zu files, %s)\n", o.repo.c_str(),
                r.commit.c_str(), r.files.size(), byte_text(total).c_str());
  } else {
    std::printf("pulled %s (commit %.12s): %zu of %zu files, %s downloaded, %s in all\n",
                o.repo.c_str(), r.commit.c_str(), r.files_downloaded, r.files.size(),
                byte_text(r.bytes_downloaded).c_str(), byte_text(total).c_str());
  }
  std::printf("%s\n", r.snapshot_dir.c_str());
  const std::string name = o.revision == "main" ? o.repo : o.repo + "@" + o.revision;
  // ORG/NAME finds the model only in the hub cache roots; elsewhere, name its snapshot.
  const auto roots = hub_cache_roots();
  const bool findable =
      a.cache_dir.empty() || std::any_of(roots.begin(), roots.end(), [&](const std::string& r) {
        std::error_code ec;
        return std::filesystem::equivalent(r, a.cache_dir, ec);
      });
  if (a.include.empty()) {
    std::printf("serve it: hibana serve %s\n", findable ? name.c_str() : r.snapshot_dir.c_str());
  }
  return 0;
}

}  // namespace

void add_pull_command(CLI::App& app, Action& action) {
  auto a = std::make_shared<PullArgs>();
  CLI::App* cmd =
      app.add_subcommand("pull", "download a model from the Hugging Face hub into its local cache");
  cmd->add_option("model", a->model, "ORG/NAME, or ORG/NAME@REVISION")->required();
  cmd->add_option("--revision", a->revision, "branch, tag or commit (default: main)");
  cmd->add_option("--include", a->include,
                  "only the files matching these globs (default: the top-level config, "
                  "tokenizer, template and safetensors files)");
  cmd->add_option(
      "--cache-dir", a->cache_dir,
      "the hub cache (default: $HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub)");
  cmd->add_option("--jobs", a->jobs, "files downloaded at once")->capture_default_str();
  cmd->add_flag("--force", a->force, "download even a model whose config hibana cannot run");
  cmd->footer(
      "Uses HF_TOKEN (or the token file of `hf auth login`) for gated and private models, "
      "HF_ENDPOINT for a mirror, and https_proxy. An interrupted pull resumes where it stopped.");
  cmd->callback([&action, a] { action = [a] { return pull(*a); }; });
}

}  // namespace hibana::cli
