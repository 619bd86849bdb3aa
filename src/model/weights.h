// The weights of a model, by role, whatever the checkpoint called them. Matrices stay in their
// storage dtype (views into the memory-mapped checkpoint where possible); small vectors (norms,
// gates, conv kernels) are converted to f32 at load.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace hibana {

class Checkpoint;
class Communicator;

struct AttentionWeights {
  Weight q, k, v, o;  // q has 2 * head_dim rows per head when the output is gated
  Weight qkv;         // [q ; k ; v] stacked on a GPU (q, k, v are then views of it); else empty
  Tensor q_norm, k_norm;
  Tensor q_gate_split;  // i32 column map [q of all heads | gate of all heads] (gated only)
};

struct DeltaNetWeights {
  // Qwen3-Next packs q, k, v, z in one projection grouped by key head and b, a in another;
  // Qwen3.5 keeps them apart. `qkvz_order` / `ba_order` map the packed columns to
  // [q heads | k heads | v heads | z heads] and [b heads | a heads].
  Weight qkvz, ba;   // Qwen3-Next
  Weight qkv, z, b, a;  // Qwen3.5
  Tensor qkvz_order, ba_order;  // emptied when folded into the rows (unpack_projections)
  Weight qkvz_ba;  // [qkvz ; ba] stacked on a GPU once both maps are folded; else empty
  Tensor conv;  // f32 [conv_channels, kernel]
  Tensor A_log, dt_bias, norm;
  Weight out;
};

struct MlpWeights {
  Weight gate, up, down;
  Weight gate_up;  // [gate ; up] stacked on a GPU (gate, up are then views of it); else empty
};

struct MoeWeights {
  Weight router;
  ExpertWeights experts;
  // experts.gate[i] is routed expert first_expert + i. All E experts from 0 without expert
  // parallelism; with it, this rank's block (the router still scores all E).
  int64_t first_expert = 0;
  MlpWeights shared;   // empty when the family has no shared expert
  Weight shared_gate;  // [1, hidden]
  // [router ; shared_gate] stacked on a GPU (one launch scores the experts and the shared
  // expert's gate; router and shared_gate are then views of it); else empty.
  Weight router_gate;
  // The routed experts followed by the shared expert (views of the same weights) where the
  // shared expert has the routed experts' shapes and storage and this rank holds every expert:
  // the layer then computes the shared expert as expert E, pair k of every token, in the
  // routed experts' launches (MoE decode is a chain of small launches: four fewer per layer).
  // Empty otherwise.
  ExpertWeights with_shared;
};

struct LayerWeights {
  MixerKind mixer = MixerKind::attention;
  FfnKind ffn = FfnKind::dense;
  int64_t state_index = 0;  // which attention (or DeltaNet) state layer this layer uses
  Tensor input_norm, post_norm;
  AttentionWeights attn;
  DeltaNetWeights gdn;
  MlpWeights mlp;
  MoeWeights moe;
};

struct MtpWeights {
  Weight fc;  // [hidden, 2 * hidden], input = [norm(embedding) ; norm(hidden)]
  Tensor pre_fc_norm_embedding, pre_fc_norm_hidden, norm;
  LayerWeights layer;
};

struct ModelWeights {
  Weight embed;
  Weight lm_head;  // the embedding when tied
  Tensor final_norm;
  std::vector<LayerWeights> layers;
  std::optional<MtpWeights> mtp;
  // Keeps converted tensors and the mapped checkpoint alive.
  std::vector<std::shared_ptr<void>> owned;
  size_t matrix_bytes = 0;  // bytes of all matrices as stored
};

// What a matrix of a layer does, for code that counts parameters, bytes or FLOPs.
enum class MatrixRole {
  dense,   // read by every token (attention, DeltaNet, dense MLP, router, shared expert)
  expert,  // one routed expert's matrix: a token reads experts_per_token of these
};
// Calls fn(weight, role) for every matrix of a layer (empty ones skipped).
template <typename Fn>
void for_each_matrix(const LayerWeights& l, Fn&& fn) {
  for (const Weight* w : {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.o, &l.gdn.qkvz, &l.gdn.ba,
                          &l.gdn.qkv, &l.gdn.z, &l.gdn.b, &l.gdn.a, &l.gdn.out, &l.mlp.gate,
                          &l.mlp.up, &l.mlp.down, &l.moe.router, &l.moe.shared.gate,
                          &l.moe.shared.up, &l.moe.shared.down, &l.moe.shared_gate}) {
    if (!w->empty()) fn(*w, MatrixRole::dense);
  }
  for (const std::vector<Weight>* list : {&l.moe.experts.gate, &l.moe.experts.up, &l.moe.experts.down}) {
    for (const Weight& w : *list) fn(w, MatrixRole::expert);
  }
}

struct LoadOptions {
  bool load_mtp = true;
  bool fp8 = false;  // convert bf16/f16/f32 matrices to fp8 at load (--weights fp8)
  // Tensor parallelism: with more than one rank, Model::load keeps only this rank's shard.
  std::shared_ptr<Communicator> comm;
  bool expert_parallel = false;  // with comm: each rank holds E / ranks whole experts (--ep)
};

// Reads every tensor the config needs from the checkpoint, checking names, shapes and dtypes.
ModelWeights load_weights(const ModelConfig& config, std::shared_ptr<Checkpoint> checkpoint,
                          const LoadOptions& options = {});

// Converts one matrix to fp8-e4m3 with one f32 scale per 128 x 128 block (amax / 448), the
// layout fp8 checkpoints ship; the new bytes are kept alive by `owned`. fp8 input is returned
// unchanged.
Weight quantize_fp8(const Weight& w, std::vector<std::shared_ptr<void>>& owned);
// The fp8 scale block of matrices converted at load.
constexpr int64_t kFp8Block = 128;
// Converts every projection and expert matrix of the model; embeddings, the lm_head, MoE
// routers and the shared-expert gate stay as they are (as in published fp8 checkpoints).
void quantize_weights_fp8(ModelWeights& weights);
// Bytes of every matrix as stored (ModelWeights::matrix_bytes).
size_t count_matrix_bytes(const ModelWeights& weights);

// Folds the column maps of packed projections (q_gate_split, qkvz_order, ba_order) into the
// order of their weight rows, so their matmuls write the regrouped layout directly; each map
// is emptied when folded (kept where block scales forbid it: the layers then gather).
void unpack_projections(ModelWeights& weights);

// Copies every tensor to `device` (tied embeddings stay shared) and drops the host copies and
// the checkpoint mapping. Weights already there are left alone. Projections that read the same
// input (q/k/v, gate/up) are stacked into one matrix there (AttentionWeights::qkv,
// MlpWeights::gate_up), so that one launch streams them.
void move_weights(ModelWeights& weights, Device device);

// Sets each MoE layer's MoeWeights::with_shared (the shared expert beside the routed ones,
// where it is stored like them). Last, once the weights are where and how they stay.
void fold_shared_experts(ModelWeights& weights);

// Random weights of the config's shapes in `dtype` (bf16, f16, f32, or fp8 with 128x128 block
// scales), for benchmarks at real shapes. Deterministic for a seed. `pooled`: matrices are
// views into a few pools of random values (make_dummy_source), for weights bound for a device.
ModelWeights make_dummy_weights(const ModelConfig& config, DType dtype, uint64_t seed = 1,
                                bool with_mtp = true, bool pooled = false);

}  // namespace hibana
