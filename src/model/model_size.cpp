// What a model weighs: its parameter count and the weight bytes a decode token reads (the
// figures `hibana bench` and the engine's cost model use).
#include "model/model.h"
#include "model/weights.h"

namespace hibana {

int64_t Model::parameter_count() const {
  int64_t n = 0;
  auto layer = [&](const LayerWeights& l) {
    for_each_matrix(l, [&](const Weight& w, MatrixRole) { n += w.rows() * w.cols(); });
    for (const Tensor* t : {&l.input_norm, &l.post_norm, &l.attn.q_norm, &l.attn.k_norm,
                            &l.gdn.conv, &l.gdn.A_log, &l.gdn.dt_bias, &l.gdn.norm}) {
      if (!t->empty()) n += t->numel();
    }
  };
  n += weights_.embed.rows() * weights_.embed.cols() + weights_.final_norm.numel();
  if (weights_.lm_head.w.data != weights_.embed.w.data) {
    n += weights_.lm_head.rows() * weights_.lm_head.cols();
  }
  for (const LayerWeights& l : weights_.layers) layer(l);
  if (weights_.mtp) {
    const MtpWeights& m = *weights_.mtp;
    n += m.fc.rows() * m.fc.cols() + m.pre_fc_norm_embedding.numel() +
         m.pre_fc_norm_hidden.numel() + m.norm.numel();
    layer(m.layer);
  }
  return n;
}

size_t Model::bytes_per_token() const {
  // One embedding row, every dense matrix, experts_per_token of each MoE layer's experts (they
  // are equal in size; with expert parallelism the rank's expected share of them), and the
  // lm_head.
  size_t b = weights_.embed.nbytes() / static_cast<size_t>(config_.vocab_size);
  b += weights_.lm_head.nbytes();
  for (const LayerWeights& l : weights_.layers) {
    size_t experts = 0;
    for_each_matrix(l, [&](const Weight& w, MatrixRole role) {
      if (role == MatrixRole::dense) b += w.nbytes(); else experts += w.nbytes();
    });
    if (!l.moe.experts.gate.empty()) {
      const size_t one = experts / l.moe.experts.gate.size();
      b += one * static_cast<size_t>(config_.experts_per_token) * l.moe.experts.gate.size() /
           static_cast<size_t>(config_.num_experts);
    }
  }
  return b;
}

}  // namespace hibana
