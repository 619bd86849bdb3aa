// A loaded model: config + weights + the backend that runs them. forward() runs one ragged
// batch: each sequence brings n >= 1 new tokens at positions [start_pos, start_pos + n), its
// KV pages and recurrent slot, and says which positions need logits.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/logits_summary.h"
#include "model/config.h"
#include "model/shard_plan.h"
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
  // Summaries instead of whole rows (core/logits_summary.h) when summary_k > 0: each
  // logits row's summary_k largest entries and its sums, at summary_temperature[row] (as
  // summarise_row takes it: < 0 no sums, 0 sum1 only). Only these cross to the host.
  int64_t summary_k = 0;
  std::vector<float> summary_temperature;
  // With summary_k: penalties applied to each row before it is summarised (none when it has no
  // rows); fetch_row still returns the rows as computed.
  LogitsPenalties penalties;
};

struct ForwardOutput {
  int64_t vocab = 0;
  int64_t hidden = 0;
  std::vector<float> logits;         // [rows, vocab]
  std::vector<float> hidden_states;  // [rows, hidden] when asked
  std::vector<int64_t> first_row;    // per sequence: its first logits row
  std::vector<int64_t> row_count;    // per sequence: how many rows it has
  // With ForwardOptions::summary_k: one per logits row, and `fetch_row` copies any row's
  // logits into a host buffer of `vocab` floats (valid until the next forward of the model);
  // `logits` may then be empty.
  std::vector<LogitsSummary> summaries;
  bool penalties_applied = false;  // the summaries are of rows with ForwardOptions::penalties
  std::function<void(int64_t row, float* dst)> fetch_row;
  const float* row(int64_t r) const { return logits.data() + r * vocab; }
  // The logits row of sequence s at the last position it asked for.
  int64_t last_row(int64_t s) const { return first_row[s] + row_count[s] - 1; }
  const float* last(int64_t s) const { return row(last_row(s)); }
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

// One rank's part of a tensor-parallel model: the ranks' communicator and the plan its weights
// were cut by.
struct Shard {
  std::shared_ptr<Communicator> comm;
  ShardPlan plan;
};

// The size of the state pool rank 0 runs a pass on, so that the other ranks can mirror it.
struct StateGeometry {
  int64_t page_size = 0, pages = 0, slots = 0;
  bool operator==(const StateGeometry&) const = default;
};

class DecodeGraphs;
struct TensorParallel;

// The state operations of one process: the backend's copies.
class BackendStateOps final : public StateOps {
 public:
  explicit BackendStateOps(Backend& backend) : backend_(backend) {}
  void copy_recurrent_slot(const StateViews& state, int32_t from, int32_t to) const override;
  bool move_block(const StateViews& state, BlockMover& mover, const BlockMove& m) const override {
    return mover.move(m, state);
  }

 private:
  Backend& backend_;
};

class Model final : public StateOps {
 public:
  // With a shard, `weights` must be that rank's part (Model::load and Model::dummy cut them).
  Model(ModelConfig config, ModelWeights weights, std::shared_ptr<Backend> backend,
        std::optional<Shard> shard = std::nullopt);
  ~Model() override;

  // Loads a Hugging Face directory (or hub ORG/NAME). Throws Error naming the problem. With
  // options.comm of more than one rank, only this rank's shard is kept.
  static std::unique_ptr<Model> load(const std::string& model, std::shared_ptr<Backend> backend,
                                     const LoadOptions& options = {});
  // A model of `config_path`'s shapes with random weights (this rank's part of them with a
  // communicator of more than one rank; whole experts per rank with `expert_parallel`).
  static std::unique_ptr<Model> dummy(const std::string& config_path, DType dtype,
                                      std::shared_ptr<Backend> backend, uint64_t seed = 1,
                                      std::shared_ptr<Communicator> comm = nullptr,
                                      bool expert_parallel = false);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  Backend& backend() const { return *backend_; }
  const std::string& source() const { return source_; }
  bool has_mtp() const { return weights_.mtp.has_value(); }

  // The state of this rank's heads (the whole model's without tensor parallelism).
  StateSpec state_spec() const;

  // On a tensor-parallel model only rank 0 calls forward() and forward_mtp(): it sends the
  // pass to the other ranks, which run it in follow(), and every rank gets the whole logits.
  void forward(std::span<const SequenceInput> seqs, const StateViews& state,
               const ForwardOptions& options, ForwardOutput& out) const;
  void forward_mtp(std::span<const MtpInput> seqs, const StateViews& state,
                   ForwardOutput& out) const;
  // On a tensor-parallel model rank 0 announces the copy and every rank makes it on its shard.
  void copy_recurrent_slot(const StateViews& state, int32_t from, int32_t to) const override;
  // On a tensor-parallel model rank 0 announces the move, every rank makes it with its own
  // mover, and all agree on the result (a collective).
  bool move_block(const StateViews& state, BlockMover& mover, const BlockMove& m) const override;

  // Parameter count (all weights, experts included) and bytes read per decoded token at
  // batch 1 (embedding row + every dense matrix + the active experts + lm_head); this rank's
  // with tensor parallelism.
  int64_t parameter_count() const;
  size_t bytes_per_token() const;
  // Identifies the weights (dtype, shape and sampled bytes of every tensor, plus the config
  // shape) and, with tensor parallelism, the shard (rank and ranks): stored state is only
  // reused by a model with the same fingerprint.
  uint64_t fingerprint() const { return fingerprint_; }
  // Decode steps run by replaying a recorded graph (0 on backends without graphs).
  int64_t decode_graph_replays() const;

  // Tensor parallelism: this process's rank and the number of ranks (0 and 1 without).
  int rank() const;
  int ranks() const;
  // The plan this rank's weights were cut by; null without tensor parallelism.
  const ShardPlan* shard_plan() const;
  // Ranks other than 0: runs every pass rank 0 runs, until rank 0 calls release_followers() or
  // its model is destroyed. `state` gives the views of a pool of rank 0's geometry (it is asked
  // again when that changes); a sequence that starts at position 0 gets its recurrent slot
  // cleared first, as rank 0's pool clears it when handing it out; the copies rank 0 makes
  // through copy_recurrent_slot() are made here too, in the same order, and the block moves
  // of move_block() are made with `mover` (none: every move fails, which every rank then
  // agrees on). Rank 0 must drive the model from one pool at a time, and must not move state
  // in other ways.
  void follow(const std::function<const StateViews&(const StateGeometry&)>& state,
              BlockMover* mover = nullptr) const;
  // Rank 0: tells the other ranks that no more passes come (also done by the destructor).
  // False when it cannot: a pass failed part-way and left the ranks out of step (end them with
  // Communicator::abort).
  bool release_followers() const;

 private:
  void forward_pass(std::span<const SequenceInput> seqs, const StateViews& state,
                    const ForwardOptions& options, ForwardOutput& out) const;
  void mtp_pass(std::span<const MtpInput> seqs, const StateViews& state, ForwardOutput& out) const;
  // out [tokens, hidden] <- the embedding rows of `tokens` (checked against the vocabulary).
  void embed(const std::vector<int32_t>& tokens, Tensor out) const;
  // The shapes the layers compute with: this rank's (the whole model's without a shard).
  const ModelConfig& layer_config() const;
  Communicator* layer_comm() const;

  ModelConfig config_;
  ModelWeights weights_;
  std::shared_ptr<Backend> backend_;
  std::string source_;
  uint64_t fingerprint_ = 0;
  std::unique_ptr<DecodeGraphs> graphs_;  // on backends that record graphs (CUDA)
  std::unique_ptr<TensorParallel> tp_;    // with a shard of more than one rank
};

}  // namespace hibana
