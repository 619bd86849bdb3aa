// Private to src/model: the column maps that regroup packed projections after their matmul
// (AttentionWeights::q_gate_split, DeltaNetWeights::qkvz_order and ba_order), for the whole
// model or for one rank's heads.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace hibana {

// q_proj rows are [q_h | gate_h] per head; the map reads them as [all q | all gates].
std::vector<int32_t> q_gate_order(int64_t heads, int64_t head_dim);
// in_proj_qkvz rows come per key head as [q (dk) | k (dk) | v (r*dv) | z (r*dv)] (r value heads
// per key head); the map reads them as [q heads | k heads | v heads | z heads].
std::vector<int32_t> qkvz_order(int64_t key_heads, int64_t key_dim, int64_t r, int64_t value_dim);
// in_proj_ba rows come per key head as [b (r) | a (r)]; the map reads [b heads | a heads].
std::vector<int32_t> ba_order(int64_t key_heads, int64_t r);

// An i32 tensor of `index`, kept alive by `owned`.
Tensor index_tensor(const std::vector<int32_t>& index, std::vector<std::shared_ptr<void>>& owned);

}  // namespace hibana
