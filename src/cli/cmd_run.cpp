// hibana run: complete one prompt and stream the result.
#include <cstdio>
#include <memory>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/model_args.h"
#include "cli/node_args.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/generator.h"
#include "parallel/communicator.h"
#include "parallel/launch.h"
#include "tokenizer/tokenizer.h"

namespace hibana::cli {

namespace {
struct RunArgs {
  ModelArgs model;
  std::string prompt;
  std::string prompt_ids;
  int64_t n = 128;
  SamplingParams sampling;
  bool print_ids = false;
  bool ignore_eos = false;
  bool exact = false;
  int tp = 1;
  NodeArgs nodes;  // --nnodes, --node-rank, --master
};

// Tokenizes, generates and prints (rank 0's whole job).
int complete(const RunArgs& a, const Model& model) {
  std::unique_ptr<Tokenizer> tok;
  std::vector<int32_t> prompt;
  if (!a.prompt_ids.empty()) {
    prompt = parse_id_list(a.prompt_ids);
  } else {
    tok = Tokenizer::load(model.source());
    prompt = tok->encode(a.prompt);
  }
  if (!a.print_ids && !tok && model.source().rfind("dummy:", 0) != 0) {
    try {
      tok = Tokenizer::load(model.source());
    } catch (const Error& e) {
      log_warn("no tokenizer (", e.what(), "); printing ids");
    }
  }
  const bool ids = a.print_ids || !tok;
  GenerateOptions go;
  go.max_new_tokens = a.n;
  go.sampling = a.sampling;
  go.stop_at_eos = !a.ignore_eos;
  go.gdn_mode = a.exact ? GdnMode::recurrent : GdnMode::aligned_chunks;
  StatePool pool = make_pool_for(model, static_cast<int64_t>(prompt.size()) + a.n + 1);
  std::unique_ptr<StreamDecoder> dec;
  if (!ids) dec = std::make_unique<StreamDecoder>(*tok);
  bool first = true;
  generate(model, pool, prompt, go, [&](int32_t t) {
    if (ids) {
      std::printf(first ? "%d" : " %d", t);
    } else {
      std::string piece = dec->push(t);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
    }
    first = false;
    std::fflush(stdout);
    return true;
  });
  if (dec) {
    std::string rest = dec->flush();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
  }
  std::printf("\n");
  return 0;
}

// --tp N: the command starts again as N MPI ranks (parallel/launch.h); each loads its shard,
// rank 0 completes the prompt and the others run its passes. The ranks talk over MPI on the
// CPU, over NCCL (one GPU each) with --device cuda; --device auto means the CPU here.
int run_ranks(const RunArgs& a) {
  start_ranks(a.model, a.nodes, a.tp);
  std::shared_ptr<Communicator> comm = join_ranks(a.model, a.nodes, a.tp);
  // The other ranks' info lines would repeat rank 0's.
  if (comm->rank() != 0 && log_level() == LogLevel::info) set_log_level(LogLevel::warn);
  std::unique_ptr<Model> model;
  try {
    model = a.model.load(comm);
    if (comm->rank() != 0) {
      follow_rank0(*model);
      return 0;
    }
    const int rc = complete(a, *model);
    model->release_followers();
    return rc;
  } catch (const Error& e) {
    const int code = e.kind() == ErrorKind::invalid_argument ? 2 : 1;
    std::fprintf(stderr, "error (rank %d): %s\n", comm->rank(), e.what());
    // Rank 0 failing between passes lets the others go; anything else may leave a rank waiting
    // in a collective that never comes, so every rank is ended.
    if (model && comm->rank() == 0 && model->release_followers()) return code;
    comm->abort(code);
  }
}
}  // namespace

void add_run_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "complete a prompt and stream the result");
  args->model.add_to(*cmd);
  auto* p = cmd->add_option("--prompt", args->prompt, "prompt text");
  auto* pi = cmd->add_option("--prompt-ids", args->prompt_ids, "prompt as token ids: 1,2,3");
  p->excludes(pi);
  cmd->add_option("-n,--max-tokens", args->n, "tokens to generate (default 128)");
  cmd->add_option("--temperature", args->sampling.temperature, "0 = greedy (default)");
  cmd->add_option("--top-k", args->sampling.top_k, "keep the k most likely tokens (0 = off)");
  cmd->add_option("--top-p", args->sampling.top_p, "nucleus sampling mass (1 = off)");
  cmd->add_option("--min-p", args->sampling.min_p, "drop tokens below min_p x the top one");
  cmd->add_option("--repetition-penalty", args->sampling.repetition_penalty, "1 = off");
  cmd->add_option("--presence-penalty", args->sampling.presence_penalty, "0 = off");
  cmd->add_option("--frequency-penalty", args->sampling.frequency_penalty, "0 = off");
  cmd->add_option("--seed", args->sampling.seed, "sampling seed");
  cmd->add_flag("--print-ids", args->print_ids, "print token ids instead of text");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "keep going after an end-of-sequence token");
  cmd->add_flag("--exact", args->exact,
                "recurrent form for every DeltaNet token (bit-identical for any chunking)");
  cmd->add_option("--tp", args->tp,
                  "tensor-parallel ranks: N processes, each with 1/N of the model (CPU over "
                  "MPI; --device cuda: one GPU each, over NCCL)")
      ->check(CLI::Range(1, 1024));
  args->nodes.add_to(*cmd);
  args->model.add_expert_parallel_flag(*cmd);
  cmd->callback([&action, args] {
    action = [args]() -> int {
      const RunArgs& a = *args;
      if (a.prompt.empty() && a.prompt_ids.empty()) {
        throw Error(ErrorKind::invalid_argument, "give --prompt TEXT or --prompt-ids 1,2,3");
      }
      check(a.n >= 0, ErrorKind::invalid_argument, "-n must be >= 0");
      a.sampling.validate();
      a.model.check_expert_parallel(a.tp);
      a.nodes.validate(a.tp, a.model.device == "cuda" ? Device::cuda : Device::cpu);
      if (a.tp > 1) return run_ranks(a);
      return complete(a, *a.model.load());
    };
  });
}

}  // namespace hibana::cli
