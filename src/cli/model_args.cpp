#include "cli/model_args.h"

#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "io/checkpoint.h"
#include "io/mapped_file.h"
#include "parallel/communicator.h"

namespace hibana::cli {

void ModelArgs::add_to(CLI::App& cmd) {
  cmd.add_option("-m,--model", model,
                 "model directory or Hugging Face ORG/NAME (default: the embedded model)");
  cmd.add_option("--load-format", load_format, "auto (read the checkpoint) or dummy (random weights)")
      ->check(CLI::IsMember({"auto", "dummy"}));
  cmd.add_option("--config", config, "config.json giving the shapes for --load-format dummy");
  cmd.add_option("--dtype", dtype, "dtype of dummy weights: bf16, f16, f32 or fp8");
  cmd.add_option("--seed-weights", seed, "seed of dummy weights");
  cmd.add_flag("--no-mtp", no_mtp, "do not load the multi-token-prediction head");
  cmd.add_option("--weights", weights,
                 "auto (as stored) or fp8 (convert bf16/f16/f32 matrices to fp8 with 128x128 "
                 "block scales at load)")
      ->check(CLI::IsMember({"auto", "fp8"}));
  cmd.add_option("--device", device, "auto (a CUDA GPU when there is one), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
}

void ModelArgs::add_expert_parallel_flag(CLI::App& cmd) {
  cmd.add_flag("--ep", expert_parallel,
               "expert parallelism with --tp N: each rank holds E/N whole MoE experts instead of "
               "1/N of every expert's columns (E must be a multiple of N)");
}

void ModelArgs::check_expert_parallel(int tp) const {
  if (!expert_parallel) return;
  check(tp >= 2, ErrorKind::invalid_argument, "--ep needs --tp N with N >= 2");
}

std::string default_model_dir() {
  if (const char* env = std::getenv("HIBANA_DEFAULT_MODEL"); env && *env) return env;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> candidates;
  if (!ec) {
    candidates.push_back(exe.parent_path() / "../models/hibana-tiny");
    candidates.push_back(exe.parent_path() / "../share/hibana/models/hibana-tiny");
  }
  candidates.push_back(fs::path(HIBANA_SOURCE_DIR) / "models/hibana-tiny");
  for (const auto& c : candidates) {
    if (fs::exists(c / "config.json", ec)) return fs::weakly_canonical(c, ec).string();
  }
  throw Error(ErrorKind::not_found,
              "no --model given and the embedded default model (models/hibana-tiny) is missing");
}

std::unique_ptr<Model> ModelArgs::load(std::shared_ptr<Communicator> comm) const {
  const bool sharded = comm && comm->size() > 1;
  std::shared_ptr<Backend> backend =
      sharded && comm->device() == Device::cuda
          ? make_cuda_backend(comm->device_index())
          : make_backend(sharded && device == "auto" ? "cpu" : device);
  if (load_format == "dummy") {
    if (config.empty()) {
      throw Error(ErrorKind::invalid_argument, "--load-format dummy needs --config CONFIG.json");
    }
    auto dt = dtype_from_name(weights == "fp8" ? "fp8" : dtype);
    if (!dt) throw Error(ErrorKind::invalid_argument, "unknown --dtype '" + dtype + "'");
    return Model::dummy(config, *dt, backend, seed, comm, expert_parallel);
  }
  LoadOptions opts;
  opts.load_mtp = !no_mtp;
  opts.fp8 = weights == "fp8";
  opts.comm = comm;
  opts.expert_parallel = expert_parallel;
  std::string path = model.empty() ? default_model_dir() : model;
  log_debug("loading ", path, " on ", backend->name());
  return Model::load(path, backend, opts);
}

ModelConfig ModelArgs::read_config() const {
  std::string path = config;
  if (load_format != "dummy") {
    path = resolve_model_dir(model.empty() ? default_model_dir() : model) + "/config.json";
  }
  check(!path.empty(), ErrorKind::invalid_argument,
        "--load-format dummy needs --config CONFIG.json");
  return parse_model_config(read_text_file(path), path);
}

std::vector<int32_t> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  std::string cur;
  auto flush = [&] {
    if (cur.empty()) return;
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(cur.c_str(), &end, 10);
    if (*end != '\0' || errno != 0 || v < 0 || v > INT32_MAX) {
      throw Error(ErrorKind::invalid_argument, "'" + cur + "' is not a token id");
    }
    ids.push_back(static_cast<int32_t>(v));
    cur.clear();
  };
  for (char ch : text) {
    if (ch == ',' || ch == ' ' || ch == '\n' || ch == '\t') {
      flush();
    } else {
      cur.push_back(ch);
    }
  }
  flush();
  if (ids.empty()) throw Error(ErrorKind::invalid_argument, "no token ids given");
  return ids;
}

}  // namespace hibana::cli
