// The options every command that loads a model shares: --model, --load-format dummy --config,
// --dtype, --device.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "model/model.h"

namespace hibana::cli {

struct ModelArgs {
  std::string model;
  std::string load_format = "auto";
  std::string config;
  std::string dtype = "bf16";
  uint64_t seed = 1;
  bool no_mtp = false;
  std::string device = "auto";
  std::string weights = "auto";
  bool expert_parallel = false;  // --ep, of the commands that take --tp

  void add_to(CLI::App& cmd);
  // Adds --ep (expert parallelism over the --tp ranks) to a command that takes --tp.
  void add_expert_parallel_flag(CLI::App& cmd);
  // Throws Error when --ep cannot go with --tp `tp` (before any rank starts): without two ranks
  // or more, or on CUDA. The model's side (MoE layers, experts the ranks divide) is
  // check_shardable's.
  void check_expert_parallel(int tp) const;
  // Loads the checkpoint (or builds dummy weights); an empty --model means the embedded default.
  // With a communicator of more than one rank, this rank's shard, on the communicator's GPU when
  // it carries device memory (NCCL), else on the CPU (--device auto then means cpu).
  std::unique_ptr<Model> load(std::shared_ptr<Communicator> comm = nullptr) const;
  // The model's config.json (or --config's), without loading any weight.
  ModelConfig read_config() const;
};

// The directory of the model `hibana` uses when no --model is given.
std::string default_model_dir();

// "1,2,3" or "1 2 3" -> ids; throws Error(invalid_argument) on anything else.
std::vector<int32_t> parse_id_list(const std::string& text);

}  // namespace hibana::cli
