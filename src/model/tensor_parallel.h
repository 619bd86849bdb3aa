// Private to src/model: what a model split over ranks keeps, and the parts of a pass that talk
// to the other ranks (the whole model's parts live in shard_plan.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"
#include "parallel/communicator.h"

namespace hibana {

struct TensorParallel {
  std::shared_ptr<Communicator> comm;
  ShardPlan plan;
  ModelConfig local;                 // shard_config(config, plan)
  std::vector<int64_t> vocab_parts;  // every rank's share of the vocabulary
  mutable bool released = false;     // rank 0 has told the others that no passes follow
  mutable bool broken = false;       // a pass failed part-way: the ranks are out of step

  TensorParallel(const ModelConfig& c, Shard shard);
  bool leader() const { return comm->rank() == 0; }
};

// t <- the sum of every rank's t (a row-parallel layer's partial output). t is contiguous and
// lives where the communicator's buffers do. Nothing to do without a communicator.
void sum_over_ranks(Communicator* comm, Tensor t);

// out[t] = table[ids[t]] with the table split by vocabulary: each rank writes the rows it
// holds, zeros elsewhere, and the sum over the ranks completes every row (adding zeros is exact).
void embed_rows(const TensorParallel& tp, Backend& be, const Weight& table,
                std::span<const int32_t> ids, Tensor out);

// logits [rows, vocab] <- every rank's [rows, its share] block of `local`.
void gather_logits(const TensorParallel& tp, std::span<const float> local, int64_t rows,
                   float* logits);

// Zeroes recurrent slot `slot` of every DeltaNet layer.
void clear_recurrent_slot(const StateViews& state, int32_t slot);

}  // namespace hibana
