// A loaded model: config + weights + the backend that runs them. forward() runs one ragged
// batch: each sequence brings n >= 1 new tokens at positions [start_pos, start_pos + n), its
// KV pages and recurrent slot, and says which positions need logits.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/state_views.h"
#include "model/weights.h"

namespace hibana {

enum class LogitsMode { none, last, all };

struct SequenceInput {
  std::span<const int32_t> tokens;
  int64_t start_pos = 0;
  std::span<const int32_t> pages;  // page ids covering positions [0, start_pos + tokens.size())
  int32_t slot = -1;               // recurrent slot (models with DeltaNet layers)
  LogitsMode logits = LogitsMode::last;
  // Optional, one per token: the recurrent state after that token is also written to this
  // slot (-1 skips), so a verification pass can roll back to any accepted position.
  std::span<const int32_t> snapshot_slots;
};

struct ForwardOptions {
  GdnMode gdn_mode = GdnMode::aligned_chunks;
  bool want_hidden = false;  // also return the final-normed hidden state of each logits row
};

struct ForwardOutput {
  int64_t vocab = 0;
  int64_t hidden = 0;
  std::vector<float> logits;         // [rows, vocab]
  std::vector<float> hidden_states;  // [rows, hidden] when asked
  std::vector<int64_t> first_row;    // per sequence: its first logits row
  std::vector<int64_t> row_count;    // per sequence: how many rows it has
  const float* row(int64_t r) const { return logits.data() + r * vocab; }
  // Logits of sequence s at the last position it asked for.
  const float* last(int64_t s) const { return row(first_row[s] + row_count[s] - 1); }
};

// One draft request for the MTP head: predicts the token after `next_token`, given the target's
// final hidden state at position `position` (the position of the token before next_token).
struct MtpInput {
  std::span<const int32_t> next_tokens;  // x_{p+1}, ... (one per position)
  std::span<const float> hidden;         // [n, hidden]: target final hidden at p, p+1, ...
  int64_t start_pos = 0;                 // p
  std::span<const int32_t> pages;        // pages covering [0, start_pos + n)
  LogitsMode logits = LogitsMode::last;
};

class DecodeGraphs;

class Model {
 public:
  Model(ModelConfig config, ModelWeights weights, std::shared_ptr<Backend> backend);
  ~Model();

  // Loads a Hugging Face directory (or hub ORG/NAME). Throws Error naming the problem.
  static std::unique_ptr<Model> load(const std::string& model, std::shared_ptr<Backend> backend,
                                     const LoadOptions& options = {});
  // A model of `config_path`'s shapes with random weights.
  static std::unique_ptr<Model> dummy(const std::string& config_path, DType dtype,
                                      std::shared_ptr<Backend> backend, uint64_t seed = 1);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  Backend& backend() const { return *backend_; }
  const std::string& source() const { return source_; }
  bool has_mtp() const { return weights_.mtp.has_value(); }

  StateSpec state_spec() const;

  void forward(std::span<const SequenceInput> seqs, const StateViews& state,
               const ForwardOptions& options, ForwardOutput& out) const;
  void forward_mtp(std::span<const MtpInput> seqs, const StateViews& state,
                   ForwardOutput& out) const;

  // Parameter count (all weights, experts included) and bytes read per decoded token at
  // batch 1 (embedding row + every dense matrix + the active experts + lm_head).
  int64_t parameter_count() const;
  size_t bytes_per_token() const;
  // Identifies the weights (dtype, shape and sampled bytes of every tensor, plus the config
  // shape): stored state is only reused by a model with the same fingerprint.
  uint64_t fingerprint() const { return fingerprint_; }
  // Decode steps run by replaying a recorded graph (0 on backends without graphs).
  int64_t decode_graph_replays() const;

 private:
  ModelConfig config_;
  ModelWeights weights_;
  std::shared_ptr<Backend> backend_;
  std::string source_;
  uint64_t fingerprint_ = 0;
  std::unique_ptr<DecodeGraphs> graphs_;  // on backends that record graphs (CUDA)
};

}  // namespace hibana
