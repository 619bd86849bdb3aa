#include "model/layers.h"

#include <cmath>
#include <optional>

#include "core/error.h"
#include "model/tensor_parallel.h"

namespace hibana::layers {

namespace {
// Scratch activations live on the backend's device; every op writes its output in full, so
// they are not cleared.
OwnedTensor scratch(const Backend& be, int64_t rows, int64_t cols) {
  return make_uninit_tensor(DType::f32, {rows, cols}, be.device());
}

// Columns [begin, begin + width) of a [rows, cols] f32 tensor, as a strided view.
Tensor columns(const Tensor& t, int64_t begin, int64_t width) {
  Tensor v = t;
  v.data = t.ptr<float>() + begin;
  v.shape[1] = width;
  return v;
}
}  // namespace

void attention(const ModelConfig& c, const AttentionWeights& w, Backend& be, const Tensor& xn,
               const BatchLayout& layout, const StateViews& state, int64_t state_index,
               Tensor out) {
  const int64_t T = xn.shape[0], nh = c.num_heads, nkv = c.num_kv_heads, hd = c.head_dim;
  const int64_t q_rows = w.q.rows();  // 2 * nh * hd when gated: [q_h | gate_h] per head
  OwnedTensor proj, kbuf, vbuf, qbuf;
  Tensor q_proj, k, v;
  if (!w.qkv.empty()) {  // stacked [q ; k ; v]: one matmul, column views of its output
    proj = scratch(be, T, w.qkv.rows());
    be.matmul(xn, w.qkv, proj.tensor);
    q_proj = columns(proj.tensor, 0, q_rows);
    k = columns(proj.tensor, q_rows, nkv * hd);
    v = columns(proj.tensor, q_rows + nkv * hd, nkv * hd);
  } else {
    proj = scratch(be, T, q_rows);
    kbuf = scratch(be, T, nkv * hd);
    vbuf = scratch(be, T, nkv * hd);
    be.matmul(xn, w.q, proj.tensor);
    be.matmul(xn, w.k, kbuf.tensor);
    be.matmul(xn, w.v, vbuf.tensor);
    q_proj = proj.tensor;
    k = kbuf.tensor;
    v = vbuf.tensor;
  }
  Tensor q = q_proj, gate;
  if (c.attention_output_gate) {  // [all q | all gates], regrouped here unless at load
    if (!w.q_gate_split.empty()) {
      qbuf = scratch(be, T, 2 * nh * hd);
      be.gather_columns(q_proj, w.q_gate_split, qbuf.tensor);
      q_proj = qbuf.tensor;
    }
    q = columns(q_proj, 0, nh * hd);
    gate = columns(q_proj, nh * hd, nh * hd);
  }
  const Tensor& kp = state.k_pages.at(state_index);
  const Tensor& vp = state.v_pages.at(state_index);
  be.attention_prep(q, k, v, w.q_norm, w.k_norm,
                    {nh, nkv, hd, c.rotary_dim, c.rope_theta, static_cast<float>(c.rms_norm_eps),
                     c.zero_centred_norm},
                    kp, vp, layout);
  OwnedTensor att = scratch(be, T, nh * hd);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  if (c.attention_output_gate) {
    be.attention_gated(q, nh, kp, vp, scale, layout, gate, att.tensor);
  } else {
    be.attention(q, nh, kp, vp, scale, layout, att.tensor);
  }
  be.matmul(att.tensor, w.o, out);
}

void deltanet(const ModelConfig& c, const DeltaNetWeights& w, Backend& be, const Tensor& xn,
              const BatchLayout& layout, const StateViews& state, int64_t state_index, Tensor out) {
  const int64_t T = xn.shape[0], nv = c.linear_value_heads, dv = c.linear_value_dim;
  const int64_t conv_dim = c.gdn_conv_dim(), value_dim = nv * dv;
  // qkvz: [q heads | k heads | v heads | z heads]; ba: [b heads | a heads]. Both are used
  // through column views only.
  OwnedTensor proj = scratch(be, T, conv_dim + value_dim + 2 * nv), packed[2];
  Tensor qkvz = columns(proj.tensor, 0, conv_dim + value_dim);
  Tensor ba = columns(proj.tensor, conv_dim + value_dim, 2 * nv);
  OwnedTensor conv_out = scratch(be, T, conv_dim);
  Tensor conv_states = state.conv.at(state_index);
  if (!w.qkvz_ba.empty()) {  // folded at load and stacked: one matmul, the conv with it
    be.matmul_conv(xn, w.qkvz_ba, w.conv, conv_states, layout, proj.tensor, conv_out.tensor);
  } else {
    if (!w.qkvz.empty()) {  // Qwen3-Next's packed layout, regrouped unless at load
      auto project = [&](const Weight& m, const Tensor& order, Tensor dst, OwnedTensor& tmp) {
        if (order.empty()) return be.matmul(xn, m, dst);
        tmp = scratch(be, T, m.rows());
        be.matmul(xn, m, tmp.tensor);
        be.gather_columns(tmp.tensor, order, dst);
      };
      project(w.qkvz, w.qkvz_order, qkvz, packed[0]);
      project(w.ba, w.ba_order, ba, packed[1]);
    } else {
      be.matmul(xn, w.qkv, columns(qkvz, 0, conv_dim));
      be.matmul(xn, w.z, columns(qkvz, conv_dim, value_dim));
      be.matmul(xn, w.b, columns(ba, 0, nv));
      be.matmul(xn, w.a, columns(ba, nv, nv));
    }
    be.gdn_conv(columns(qkvz, 0, conv_dim), w.conv, conv_states, layout, conv_out.tensor);
  }
  OwnedTensor core = scratch(be, T, value_dim);
  Backend::GdnShape shape{c.linear_key_heads, nv, c.linear_key_dim, dv};
  be.gdn_recurrence(conv_out.tensor, columns(ba, 0, nv), columns(ba, nv, nv), w.A_log, w.dt_bias,
                    shape, state.ssm.at(state_index), layout, core.tensor);
  be.matmul_gated_norm(core.tensor, columns(qkvz, conv_dim, value_dim), w.norm,
                       static_cast<float>(c.rms_norm_eps), w.out, out);
}

void mlp(const MlpWeights& w, Backend& be, const Tensor& xn, Tensor out) {
  const int64_t T = xn.shape[0], inter = w.gate.rows();
  OwnedTensor g = scratch(be, T, inter);
  if (!w.gate_up.empty()) {  // stacked [gate ; up]: one matmul, with the gating on a GPU
    be.matmul_swiglu(xn, w.gate_up, g.tensor);
  } else {
    OwnedTensor u = scratch(be, T, inter);
    be.matmul(xn, w.gate, g.tensor);
    be.matmul(xn, w.up, u.tensor);
    be.silu_mul(g.tensor, u.tensor, g.tensor);
  }
  be.matmul(g.tensor, w.down, out);
}

void moe(const ModelConfig& c, const MoeWeights& w, Backend& be, const Tensor& xn, Tensor out,
         const Backend::ResidualNorm* then) {
  const int64_t T = xn.shape[0], E = c.num_experts, k = c.experts_per_token;
  // With the shared expert's gate stacked under the router: one matmul, its last column the
  // gate (each output column is its own weight row's product: the same values either way).
  const bool stacked = !w.router_gate.empty();
  OwnedTensor scores = scratch(be, T, stacked ? E + 1 : E), own_gate;
  be.matmul(xn, stacked ? w.router_gate : w.router, scores.tensor);
  const Tensor logits = stacked ? columns(scores.tensor, 0, E) : scores.tensor;
  Tensor gate;  // the shared expert's gate logits [T, 1]
  if (!w.shared.gate.empty()) {
    if (stacked) {
      gate = columns(scores.tensor, E, 1);
    } else {
      own_gate = scratch(be, T, 1);
      be.matmul(xn, w.shared_gate, own_gate.tensor);
      gate = own_gate.tensor;
    }
  }
  // With the shared expert beside the routed ones (MoeWeights::with_shared) it is every token's
  // pair k: id E, weight sigmoid(gate), computed in the routed experts' launches.
  const bool folded = !w.with_shared.gate.empty();
  const int64_t pairs = k + (folded ? 1 : 0);
  OwnedTensor ids = make_uninit_tensor(DType::i32, {T, pairs}, be.device()),
              weights = scratch(be, T, pairs);
  const Tensor route_gate = folded ? gate : Tensor{};
  const ExpertWeights& experts = folded ? w.with_shared : w.experts;
  const int64_t held = static_cast<int64_t>(w.experts.gate.size());
  // The routed experts' output is the FFN's whole output unless a shared expert of its own
  // follows (which reads xn: `then` may overwrite it).
  const bool last = folded || w.shared.gate.empty();
  if (held == E) {
    be.moe_route_experts(xn, logits, k, c.norm_topk_prob, route_gate, experts, ids.tensor,
                         weights.tensor, out, last ? then : nullptr);
  } else {  // expert parallelism: the pairs of other ranks' experts are skipped here
    be.moe_route(logits, k, c.norm_topk_prob, route_gate, ids.tensor, weights.tensor);
    be.moe_keep_experts(ids.tensor, weights.tensor, w.first_expert, held);
    be.moe_experts(xn, ids.tensor, weights.tensor, experts, out);
  }
  if (!last) {
    OwnedTensor shared = scratch(be, T, c.hidden_size);
    mlp(w.shared, be, xn, shared.tensor);
    be.add_sigmoid_scaled(out, shared.tensor, gate);
  }
  if (then && (!last || held != E)) {
    be.add_rmsnorm(then->x, out, then->weight, then->eps, then->zero_centred, then->normed);
  }
}

namespace {
// One layer. Its input norm: xn already holds it (`normed`: the previous layer's FFN output
// joined x there), or x and the previous layer's FFN output `pending` join in it
// (Backend::add_rmsnorm, the bits of the add and the norm), or x alone. Its FFN output goes to
// ffn_out; with `next_norm` (the next layer's input norm weight) it also joins x and xn
// receives the next layer's input norm (the same ops, one layer earlier: a GPU can fold them
// into the FFN's last kernel).
void layer_body(const ModelConfig& c, const LayerWeights& w, Backend& be, Tensor x,
                const BatchLayout& layout, const StateViews& state, Communicator* comm, bool normed,
                const Tensor* pending, Tensor xn, const Tensor* next_norm, Tensor ffn_out) {
  const int64_t T = x.shape[0], H = x.shape[1];
  const float eps = static_cast<float>(c.rms_norm_eps);
  OwnedTensor y = scratch(be, T, H);
  if (pending) {
    be.add_rmsnorm(x, *pending, w.input_norm, eps, c.zero_centred_norm, xn);
  } else if (!normed) {
    be.rmsnorm(x, w.input_norm, eps, c.zero_centred_norm, xn);
  }
  if (w.mixer == MixerKind::attention) {
    attention(c, w.attn, be, xn, layout, state, w.state_index, y.tensor);
  } else {
    deltanet(c, w.gdn, be, xn, layout, state, w.state_index, y.tensor);
  }
  sum_over_ranks(comm, y.tensor);
  be.add_rmsnorm(x, y.tensor, w.post_norm, eps, c.zero_centred_norm, xn);
  std::optional<Backend::ResidualNorm> then;
  if (next_norm) then = Backend::ResidualNorm{x, *next_norm, eps, c.zero_centred_norm, xn};
  if (w.ffn == FfnKind::moe) {
    moe(c, w.moe, be, xn, ffn_out, then ? &*then : nullptr);
  } else {
    mlp(w.mlp, be, xn, ffn_out);
    if (then) be.add_rmsnorm(x, ffn_out, *next_norm, eps, c.zero_centred_norm, xn);
  }
  sum_over_ranks(comm, ffn_out);
}
}  // namespace

void decoder_layer(const ModelConfig& c, const LayerWeights& w, Backend& be, Tensor x,
                   const BatchLayout& layout, const StateViews& state, Communicator* comm) {
  OwnedTensor y = scratch(be, x.shape[0], x.shape[1]), xn = scratch(be, x.shape[0], x.shape[1]);
  layer_body(c, w, be, x, layout, state, comm, false, nullptr, xn.tensor, nullptr, y.tensor);
  be.add(x, y.tensor);
}

void decoder_layers(const ModelConfig& c, const std::vector<LayerWeights>& layers, Backend& be,
                    Tensor x, const BatchLayout& layout, const StateViews& state,
                    Communicator* comm) {
  if (layers.empty()) return;
  // One buffer serves every layer's FFN output, another every layer's norms: a layer writes
  // them after the ops that read the previous layer's (one stream, in order). With ranks, an
  // FFN output is summed over them before it joins x, in the next layer's input norm; alone, it
  // joins x at the end of its own layer (the same ops in the same order).
  OwnedTensor y = scratch(be, x.shape[0], x.shape[1]), xn = scratch(be, x.shape[0], x.shape[1]);
  const bool join = comm == nullptr;
  for (size_t i = 0; i < layers.size(); ++i) {
    const bool joined = join && i > 0, next = join && i + 1 < layers.size();
    layer_body(c, layers[i], be, x, layout, state, comm, joined,
               i > 0 && !join ? &y.tensor : nullptr, xn.tensor,
               next ? &layers[i + 1].input_norm : nullptr, y.tensor);
  }
  be.add(x, y.tensor);
}

}  // namespace hibana::layers
