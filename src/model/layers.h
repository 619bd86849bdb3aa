// The building blocks of every architecture, written once against Backend. Internal to model/.
#pragma once

#include "backend/backend.h"
#include "model/config.h"
#include "model/state_views.h"
#include "model/weights.h"
#include "parallel/communicator.h"

namespace hibana::layers {

// x [T, hidden] is updated in place: x += mixer(norm(x)); x += ffn(norm(x)). With a
// communicator, `w` and `c` are one rank's shard: the mixer's and the FFN's outputs are partial
// sums that are added over the ranks before they join x.
void decoder_layer(const ModelConfig& c, const LayerWeights& w, Backend& be, Tensor x,
                   const BatchLayout& layout, const StateViews& state,
                   Communicator* comm = nullptr);

// Every layer in order, as decoder_layer each, except that a layer's FFN output joins x with the
// next layer's input norm (Backend::add_rmsnorm: one op instead of an add and a norm, the same
// bits; alone, at the end of the layer, so a backend can fold it into the FFN's last kernel).
void decoder_layers(const ModelConfig& c, const std::vector<LayerWeights>& layers, Backend& be,
                    Tensor x, const BatchLayout& layout, const StateViews& state,
                    Communicator* comm = nullptr);

void attention(const ModelConfig& c, const AttentionWeights& w, Backend& be, const Tensor& xn,
               const BatchLayout& layout, const StateViews& state, int64_t state_index,
               Tensor out);
void deltanet(const ModelConfig& c, const DeltaNetWeights& w, Backend& be, const Tensor& xn,
              const BatchLayout& layout, const StateViews& state, int64_t state_index,
              Tensor out);
void mlp(const MlpWeights& w, Backend& be, const Tensor& xn, Tensor out);
// With expert parallelism `w` holds a block of the experts (MoeWeights::first_expert): the
// (token, slot) pairs routed to the others add nothing here (another rank computes them).
// With `then`, out then joins the residual stream (Backend::moe_route_experts's `then`).
void moe(const ModelConfig& c, const MoeWeights& w, Backend& be, const Tensor& xn, Tensor out,
         const Backend::ResidualNorm* then = nullptr);

}  // namespace hibana::layers
