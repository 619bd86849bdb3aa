// What per-sequence state a model needs (StateSpec) and the storage the engine hands it for one
// forward pass (StateViews). The memory itself is owned by src/state/, never by the model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hibana {

struct StateSpec {
  Device device = Device::cpu;  // where the model's backend wants the state to live
  // Attention layers (including the MTP layer, last) keep K and V in pages of page_size tokens.
  int64_t attention_layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  // Gated DeltaNet layers keep, per sequence slot, a conv window and a delta-rule state.
  int64_t deltanet_layers = 0;
  int64_t conv_channels = 0;
  int64_t conv_window = 0;  // kernel - 1
  int64_t value_heads = 0;
  int64_t key_dim = 0;
  int64_t value_dim = 0;

  size_t kv_bytes_per_token() const {
    return static_cast<size_t>(attention_layers * 2 * kv_heads * head_dim) * sizeof(float);
  }
  size_t recurrent_bytes_per_slot() const {
    return static_cast<size_t>(deltanet_layers *
                               (conv_channels * conv_window + value_heads * key_dim * value_dim)) *
           sizeof(float);
  }
};

struct StateViews {
  int64_t page_size = 0;
  std::vector<Tensor> k_pages;  // per attention layer: [pages, kv_heads, page_size, head_dim]
  std::vector<Tensor> v_pages;
  std::vector<Tensor> conv;  // per DeltaNet layer: [slots, conv_channels, conv_window]
  std::vector<Tensor> ssm;   // per DeltaNet layer: [slots, value_heads, key_dim, value_dim]
};

// One movement of state between a pool and the tiers below it (host RAM, SSD), named by the
// prefix cache's block key: a page's KV or a slot's recurrent state saved under the key or
// loaded from it, a block forgotten, or the tiers opened (`setup` says what they are, in words
// of the code that makes them) and closed. The model carries it to every rank; what it means is
// the BlockMover's business.
struct BlockMove {
  enum class Op : int32_t { open = 0, close, save_page, save_slot, load_page, load_slot, forget };
  Op op = Op::save_page;
  uint64_t key_hi = 0, key_lo = 0;
  uint32_t kind = 0;   // the tiers' block kind
  int32_t index = -1;  // the page or slot
  std::string setup;   // open only
};

// Carries out BlockMoves on one process's pool (its shard of the state) and its own tiers.
class BlockMover {
 public:
  virtual ~BlockMover() = default;
  // False when it could not (a block missing or damaged, a full disk, no tiers).
  virtual bool move(const BlockMove& m, const StateViews& state) = 0;
};

// The changes to state made outside a forward pass: a recurrent slot copied to another (a
// prefix-cache checkpoint taken, a sequence resumed from one, a rollback to a snapshot slot),
// and blocks moved to and from the tiers below the pool. Code above the model makes them
// through this interface, never through Backend directly, so that a tensor-parallel model
// (Model implements it) makes them on every rank's shard, in order with its passes. KV pages
// shared by the prefix cache need no operation here: it shares them by id.
class StateOps {
 public:
  virtual ~StateOps() = default;
  // Slot `to` <- slot `from`, in the conv window and delta state of every DeltaNet layer.
  virtual void copy_recurrent_slot(const StateViews& state, int32_t from, int32_t to) const = 0;
  // Runs `m` with `mover`; on a tensor-parallel model every other rank runs it too, with the
  // mover it follows with (each on its own shard and its own tiers), and the result is true
  // only when every rank succeeded (the ranks agree before anyone uses restored state).
  virtual bool move_block(const StateViews& state, BlockMover& mover, const BlockMove& m) const = 0;
};

}  // namespace hibana
