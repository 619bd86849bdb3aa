// hibana serve [MODEL]: the OpenAI and Anthropic HTTP APIs over the engine. The server listens
// at once (GET /health answers 503 while the model loads) and stops on SIGINT or SIGTERM.
// With --tp N it runs as N MPI ranks, rank 0 serving (serve_ranks).
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "cli/node_args.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "parallel/communicator.h"
#include "parallel/launch.h"
#include "server/auth.h"
#include "server/byte_size.h"
#include "server/http_server.h"
#include "server/served_model.h"

namespace hibana::cli {

namespace {

struct ServeArgs {
  ModelArgs model;
  std::string host = "127.0.0.1";
  int port = 30001;
  std::vector<std::string> api_keys;
  bool insecure_no_auth = false;
  std::string max_body_size = "64MiB";
  std::vector<std::string> cors_origins;
  std::vector<std::string> served_names;
  std::string tokenizer;  // directory of the tokenizer, chat template and sampling defaults
  std::string kv_cache_size = "auto";
  int64_t max_seqs = 32;
  int64_t step_tokens = 512;
  int64_t prefill_tokens = -1;  // (auto: EngineOptions::prefill_token_budget)
  int tp = 1;
  NodeArgs nodes;  // --nnodes, --node-rank, --master
  int64_t max_queue = 1024;
  int64_t max_context = 0;
  int64_t max_output_tokens = 0;
  int http_threads = 256;
  int64_t stored_responses = 256;
  std::string stored_responses_size = "64MiB";
  bool exact = false;
  bool no_prefix_cache = false;
  std::string cache_dir;
  std::string ssd_cache_size = "16GiB";
  std::string host_cache_size = "0";
};

// The name clients use: the model directory's name, or ORG/NAME (without @REVISION) as given
// for the hub cache.
std::string default_served_name(const std::string& model_arg, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!model_arg.empty() && !fs::is_directory(model_arg, ec)) {
    return model_arg.substr(0, model_arg.find('@'));
  }
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

struct ServeSetup {
  server::ServerOptions so;
  EngineOptions eo;
};

// Every option checked before a model loads (or ranks start).
ServeSetup setup(const ServeArgs& a) {
  ServeSetup s;
  server::ServerOptions& so = s.so;
  so.host = a.host;
  so.port = a.port;
  so.api_keys = a.api_keys;
  so.cors_origins = a.cors_origins;
  so.threads = a.http_threads;
  so.max_body_bytes =
      static_cast<size_t>(server::parse_byte_size(a.max_body_size, "--max-body-size"));
  check(a.stored_responses >= 0, ErrorKind::invalid_argument,
        "--stored-responses must be 0 (none) or positive");
  so.stored_responses.max_responses = static_cast<size_t>(a.stored_responses);
  so.stored_responses.max_bytes = static_cast<size_t>(
      server::parse_byte_size(a.stored_responses_size, "--stored-responses-size"));
  check(a.port >= 0 && a.port <= 65535, ErrorKind::invalid_argument, "--port must be 0..65535");
  check(a.model.load_format != "dummy" || !a.tokenizer.empty(), ErrorKind::invalid_argument,
        "--load-format dummy has no tokenizer: give --tokenizer DIR (a model directory with "
        "tokenizer.json, and tokenizer_config.json for chat)");
  if (!server::is_loopback_host(a.host) && a.api_keys.empty() && !a.insecure_no_auth) {
    throw Error(ErrorKind::invalid_argument,
                "binding " + a.host +
                    " exposes the server beyond this machine: give --api-key "
                    "KEY (or HIBANA_API_KEY), or --insecure-no-auth to serve without a key");
  }
  EngineOptions& eo = s.eo;
  // 0: the engine sizes the pool from the device's free memory once the model is loaded.
  eo.kv_cache_bytes =
      a.kv_cache_size == "auto" ? 0 : server::parse_byte_size(a.kv_cache_size, "--kv-cache-size");
  eo.max_sequences = a.max_seqs;
  eo.step_token_budget = a.step_tokens;
  eo.prefill_token_budget = a.prefill_tokens;
  eo.max_queue = a.max_queue;
  eo.max_context = a.max_context;
  eo.gdn_mode = a.exact ? GdnMode::recurrent : GdnMode::aligned_chunks;
  eo.prefix_cache = !a.no_prefix_cache;
  eo.cache_dir = a.cache_dir;
  eo.ssd_cache_bytes = server::parse_byte_size(a.ssd_cache_size, "--ssd-cache-size");
  eo.host_cache_bytes = server::parse_byte_size(a.host_cache_size, "--host-cache-size");
  check((eo.kv_cache_bytes > 0 || a.kv_cache_size == "auto") && eo.max_sequences > 0 &&
            eo.step_token_budget > 0 && eo.max_queue > 0 && eo.max_context >= 0,
        ErrorKind::invalid_argument,
        "--kv-cache-size, --max-seqs, --step-tokens and --max-queue must be positive");
  check(a.max_output_tokens >= 0, ErrorKind::invalid_argument,
        "--max-output-tokens must be 0 (no limit) or positive");
  return s;
}

// Listens, loads the model with `load` (on another thread: /health answers 503 meanwhile) and
// serves it until SIGINT or SIGTERM. Returns once the server, the engine and every reference
// to the model it took are gone.
int serve_http(const ServeArgs& a, const ServeSetup& setup,
               const std::function<std::shared_ptr<const Model>()>& load) {
  const server::ServerOptions& so = setup.so;
  const EngineOptions& eo = setup.eo;
  // SIGINT/SIGTERM (stop) and SIGUSR1 (the model failed to load) are taken by sigwait below;
  // blocking them first makes every thread started from here on inherit the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  server::HttpServer http(so);
  const int port = http.start();
  log_info("hibana serve: listening on http://", a.host, ":", port, " (loading the model)");

  std::optional<Error> failure;
  std::shared_ptr<const server::ServedModel> served;
  std::thread loader([&] {
    try {
      std::shared_ptr<const Model> model = load();
      const std::string dir = a.tokenizer.empty() ? model->source() : a.tokenizer;
      auto engine = std::make_shared<Engine>(model, eo);
      std::vector<std::string> names = a.served_names;
      if (names.empty()) names.push_back(default_served_name(a.model.model, dir));
      auto m = server::ServedModel::open(dir, names, server::make_engine_service(engine));
      m->max_output_tokens = a.max_output_tokens;
      if (!m->prompts) log_warn("the model has no chat template: only /v1/completions works");
      served = std::move(m);
      http.set_model(served);
      // Logged once requests are served (a client may start on this line).
      log_info("ready: serving '", names.front(), "' (context ", served->max_context(),
               " tokens) on http://", a.host, ":", port);
    } catch (const Error& e) {
      failure = e;
    } catch (const std::exception& e) {
      failure = Error(ErrorKind::internal, e.what());
    }
    if (failure) {
      http.set_failed(std::string("Model failed to load: ") + failure->what());
      kill(getpid(), SIGUSR1);
    }
  });

  int sig = 0;
  sigwait(&signals, &sig);
  if (sig != SIGUSR1)
    log_info("hibana serve: stopping (", sig == SIGINT ? "SIGINT" : "SIGTERM", ")");
  http.stop();
  loader.join();
  if (failure) throw *failure;
  return 0;
}

// --tp N: the command starts again as N MPI ranks (parallel/launch.h), as `run --tp` does. Rank 0
// serves HTTP and runs the engine; the others load their shard and follow its passes, state
// copies and tier moves. SIGINT/SIGTERM reach rank 0's sigwait (the other ranks block them and end
// when rank 0 releases them, or when mpirun ends the job because a rank died).
int serve_ranks(const ServeArgs& a, const ServeSetup& s) {
  start_ranks(a.model, a.nodes, a.tp);
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // before MPI starts threads of its own
  std::shared_ptr<Communicator> comm = join_ranks(a.model, a.nodes, a.tp);
  if (comm->rank() != 0) {
    if (log_level() == LogLevel::info) set_log_level(LogLevel::warn);
    try {
      std::unique_ptr<Model> model = a.model.load(comm);
      follow_rank0(*model);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error (rank %d): %s\n", comm->rank(), e.what());
      comm->abort(1);
    }
  }
  log_info("hibana serve: rank 0 of ", a.tp, " ranks, pid ", getpid(),
           " (SIGINT or SIGTERM to this process stops every rank)");
  std::shared_ptr<const Model> model;
  int rc = 1;
  try {
    rc = serve_http(a, s, [&] {
      model = a.model.load(comm);
      return model;
    });
  } catch (const Error& e) {
    std::fprintf(stderr, "error (rank 0): %s\n", e.what());
    rc = e.kind() == ErrorKind::invalid_argument ? 2 : 1;
  }
  // The engine is gone: no pass can follow the stop message. Without a model (it failed to
  // load) the other ranks may be anywhere in theirs.
  if (!model || !model->release_followers()) comm->abort(rc == 0 ? 1 : rc);
  return rc;
}

int serve(const ServeArgs& a) {
  const ServeSetup s = setup(a);
  a.model.check_expert_parallel(a.tp);
  a.nodes.validate(a.tp, a.model.device == "cuda" ? Device::cuda : Device::cpu);
  if (a.tp > 1) return serve_ranks(a, s);
  return serve_http(a, s, [&] { return std::shared_ptr<const Model>(a.model.load()); });
}

}  // namespace

void add_serve_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "serve the OpenAI and Anthropic HTTP APIs");
  args->model.add_to(*cmd);
  cmd->add_option("model_dir", args->model.model,
                  "model directory or Hugging Face ORG/NAME (default: the embedded model)");
  cmd->add_option("--host", args->host, "address to bind (default 127.0.0.1)");
  cmd->add_option("--port", args->port, "port to bind (default 30001; 0: any free port)");
  cmd->add_option("--api-key", args->api_keys,
                  "key clients must send (Authorization: Bearer KEY or x-api-key: KEY); repeatable")
      ->envname("HIBANA_API_KEY");
  cmd->add_flag("--insecure-no-auth", args->insecure_no_auth,
                "allow a non-loopback --host without --api-key");
  cmd->add_option("--max-body-size", args->max_body_size, "largest request body (default 64MiB)");
  cmd->add_option("--cors-origin", args->cors_origins,
                  "allow browser requests from this origin ('*': any); repeatable (default: none)");
  cmd->add_option("--served-model-name", args->served_names,
                  "name(s) clients use for the model (default: the model directory's name)");
  cmd->add_option("--tokenizer", args->tokenizer,
                  "directory whose tokenizer.json, chat template (tokenizer_config.json) and "
                  "sampling defaults (generation_config.json) to serve with (default: the "
                  "model's; needed with --load-format dummy)");
  cmd->add_option("--kv-cache-size,--gpu-cache-size", args->kv_cache_size,
                  "device pool for the KV pages of running and cached sequences, e.g. 512MiB, "
                  "8GiB (default auto: on a GPU, its free memory once the model is loaded, less "
                  "a reserve for activations, halved on unified memory; 1GiB on the CPU)");
  cmd->add_option("--max-seqs", args->max_seqs, "sequences generated at once (default 32)");
  cmd->add_option("--tp", args->tp,
                  "tensor-parallel ranks: N processes, each with 1/N of the model (CPU over MPI; "
                  "each rank keeps its shard's state in its own host tier and in "
                  "--cache-dir/rank-R-of-N; no prefetch)")
      ->check(CLI::Range(1, 1024));
  args->model.add_expert_parallel_flag(*cmd);
  args->nodes.add_to(*cmd);
  cmd->add_option("--step-tokens", args->step_tokens,
                  "tokens per forward pass, decode plus prefill (default 512)");
  cmd->add_option("--prefill-tokens", args->prefill_tokens,
                  "tokens of a forward pass with nothing decoding, at least --step-tokens "
                  "(default 4096 on a GPU, --step-tokens on the CPU)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--max-queue", args->max_queue,
                  "requests waiting before new ones get 429 (default 1024)");
  cmd->add_option("--max-context", args->max_context,
                  "context length in tokens (default: the model's)");
  cmd->add_option("--max-output-tokens", args->max_output_tokens,
                  "most tokens one reply may generate, whatever the request asks (default 0: up "
                  "to the end of the context)");
  cmd->add_option("--http-threads", args->http_threads, "connections served at once (default 256)");
  cmd->add_option("--stored-responses", args->stored_responses,
                  "Responses API responses kept in memory for previous_response_id, least "
                  "recently used evicted first (default 256; 0: none)");
  cmd->add_option("--stored-responses-size", args->stored_responses_size,
                  "most memory the stored responses' JSON may take (default 64MiB)");
  cmd->add_flag("--no-prefix-cache", args->no_prefix_cache,
                "recompute every prompt instead of reusing earlier requests' state");
  cmd->add_option("--cache-dir", args->cache_dir,
                  "directory for the SSD tier of the prefix cache (default: none)");
  cmd->add_option("--ssd-cache-size", args->ssd_cache_size,
                  "largest size of the SSD tier (default 16GiB)");
  cmd->add_option("--host-cache-size", args->host_cache_size,
                  "host-RAM tier between the device pool and the SSD, e.g. 8GiB (default 0: "
                  "none; skipped on unified-memory GPUs)");
  cmd->add_flag("--exact", args->exact,
                "recurrent form for every DeltaNet token (bit-identical for any chunking)");
  cmd->callback([&action, args] { action = [args] { return serve(*args); }; });
}

}  // namespace hibana::cli
