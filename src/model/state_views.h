// What per-sequence state a model needs (StateSpec) and the storage the engine hands it for one
// forward pass (StateViews). The memory itself is owned by src/state/, never by the model.
#pragma once

#include <cstdint>
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

// The changes to state made outside a forward pass: a recurrent slot copied to another (a
// prefix-cache checkpoint taken, a sequence resumed from one, a rollback to a snapshot slot).
// Code above the model makes them through this interface, never through Backend directly, so
// that a tensor-parallel model (Model implements it) makes them on every rank's shard, in order
// with its passes. KV pages need no operation here: the prefix cache shares them by id.
class StateOps {
 public:
  virtual ~StateOps() = default;
  // Slot `to` <- slot `from`, in the conv window and delta state of every DeltaNet layer.
  virtual void copy_recurrent_slot(const StateViews& state, int32_t from, int32_t to) const = 0;
};

}  // namespace hibana
