// Runs one sequence from prompt to completion: chunked prefill, then token-by-token decode.
// The scheduler (many sequences, one batch per step) builds on the same Model::forward.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/sampler.h"
#include "model/model.h"
#include "state/state_pool.h"

namespace hibana {

struct GenerateOptions {
  int64_t max_new_tokens = 32;
  SamplingParams sampling;
  bool stop_at_eos = true;
  int64_t prefill_chunk = 512;  // rounded down to a multiple of the page size
  GdnMode gdn_mode = GdnMode::aligned_chunks;
};

// Calls on_token for each new token; returning false stops generation. Returns the tokens.
std::vector<int32_t> generate(const Model& model, StatePool& pool, std::span<const int32_t> prompt,
                              const GenerateOptions& options,
                              const std::function<bool(int32_t)>& on_token = {});

// Ranks other than 0 of a tensor-parallel model: runs rank 0's passes, recurrent slot copies
// and state block moves (Model::follow) on a pool of this rank's heads that mirrors rank 0's,
// with host-RAM and SSD tiers of its own that rank 0's engine opens and closes (FollowerTiers,
// engine/rank_tiers.h), until rank 0 releases them.
void follow_rank0(const Model& model);

// A pool sized for one sequence of up to max_positions tokens (plus snapshot slots).
StatePool make_pool_for(const Model& model, int64_t max_positions, int64_t sequences = 1,
                        int64_t page_size = 64);

}  // namespace hibana
