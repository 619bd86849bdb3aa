// Maps each architecture's tensor names onto ModelWeights.
#include "model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>

#include "core/device_memory.h"
#include "core/error.h"
#include "core/log.h"
#include "core/numeric.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "model/column_orders.h"
#include "model/weight_source.h"

namespace hibana {

namespace {

using Fill = WeightSource::Fill;

MlpWeights load_mlp(WeightSource& src, const std::string& p, int64_t hidden, int64_t inter) {
  MlpWeights m;
  m.gate = src.matrix(p + "gate_proj.weight", inter, hidden);
  m.up = src.matrix(p + "up_proj.weight", inter, hidden);
  m.down = src.matrix(p + "down_proj.weight", hidden, inter);
  return m;
}

MoeWeights load_moe(const ModelConfig& c, WeightSource& src, const std::string& p) {
  MoeWeights m;
  const int64_t E = c.num_experts, H = c.hidden_size, I = c.moe_intermediate_size;
  m.router = src.matrix(p + "gate.weight", E, H);
  if (src.has(p + "experts.gate_up_proj")) {
    // Fused layout: gate_up [E, 2I, H] (gate rows first), down [E, H, I].
    std::vector<Weight> gu = src.stacked(p + "experts.gate_up_proj", E, 2 * I, H);
    std::vector<Weight> dn = src.stacked(p + "experts.down_proj", E, H, I);
    for (int64_t e = 0; e < E; ++e) {
      Weight g = gu[e], u = gu[e];
      g.w = g.w.slice_rows(0, I);
      u.w = u.w.slice_rows(I, 2 * I);
      if (!gu[e].scale.empty()) {
        if (I % gu[e].block_rows != 0) {
          throw Error(ErrorKind::unsupported,
                      "fused fp8 experts whose gate/up split is not on a scale block boundary");
        }
        const int64_t half = I / gu[e].block_rows;
        g.scale = gu[e].scale.slice_rows(0, half);
        u.scale = gu[e].scale.slice_rows(half, 2 * half);
      }
      m.experts.gate.push_back(g);
      m.experts.up.push_back(u);
      m.experts.down.push_back(dn[e]);
    }
  } else {
    for (int64_t e = 0; e < E; ++e) {
      std::string ep = p + "experts." + std::to_string(e) + ".";
      m.experts.gate.push_back(src.matrix(ep + "gate_proj.weight", I, H));
      m.experts.up.push_back(src.matrix(ep + "up_proj.weight", I, H));
      m.experts.down.push_back(src.matrix(ep + "down_proj.weight", H, I));
    }
  }
  if (c.shared_expert_intermediate_size > 0) {
    m.shared = load_mlp(src, p + "shared_expert.", H, c.shared_expert_intermediate_size);
    m.shared_gate = src.matrix(p + "shared_expert_gate.weight", 1, H);
  }
  return m;
}

AttentionWeights load_attention(const ModelConfig& c, WeightSource& src, const std::string& p) {
  AttentionWeights a;
  const int64_t H = c.hidden_size, hd = c.head_dim, nh = c.num_heads, nkv = c.num_kv_heads;
  const int64_t qrows = nh * hd * (c.attention_output_gate ? 2 : 1);
  a.q = src.matrix(p + "q_proj.weight", qrows, H);
  a.k = src.matrix(p + "k_proj.weight", nkv * hd, H);
  a.v = src.matrix(p + "v_proj.weight", nkv * hd, H);
  a.o = src.matrix(p + "o_proj.weight", H, nh * hd);
  Fill norm_fill = c.zero_centred_norm ? Fill::zeros : Fill::ones;
  a.q_norm = src.vector_f32(p + "q_norm.weight", hd, norm_fill);
  a.k_norm = src.vector_f32(p + "k_norm.weight", hd, norm_fill);
  if (c.attention_output_gate) a.q_gate_split = index_tensor(q_gate_order(nh, hd), src.owned);
  return a;
}

DeltaNetWeights load_deltanet(const ModelConfig& c, WeightSource& src, const std::string& p) {
  DeltaNetWeights g;
  const int64_t H = c.hidden_size, nk = c.linear_key_heads, nv = c.linear_value_heads,
                dk = c.linear_key_dim, dv = c.linear_value_dim, r = nv / nk;
  const int64_t conv_dim = c.gdn_conv_dim(), value_dim = nv * dv;
  const bool packed = src.has(p + "in_proj_qkvz.weight") ||
                      (c.arch == Arch::qwen3_next && !src.has(p + "in_proj_qkv.weight"));
  if (packed) {
    g.qkvz = src.matrix(p + "in_proj_qkvz.weight", conv_dim + value_dim, H);
    g.ba = src.matrix(p + "in_proj_ba.weight", 2 * nv, H);
    g.qkvz_order = index_tensor(qkvz_order(nk, dk, r, dv), src.owned);
    g.ba_order = index_tensor(ba_order(nk, r), src.owned);
  } else {
    g.qkv = src.matrix(p + "in_proj_qkv.weight", conv_dim, H);
    g.z = src.matrix(p + "in_proj_z.weight", value_dim, H);
    g.b = src.matrix(p + "in_proj_b.weight", nv, H);
    g.a = src.matrix(p + "in_proj_a.weight", nv, H);
  }
  Tensor conv = src.vector_f32(p + "conv1d.weight", conv_dim * c.linear_conv_kernel, Fill::random);
  g.conv = Tensor(conv.data, DType::f32, {conv_dim, c.linear_conv_kernel});
  g.A_log = src.vector_f32(p + "A_log", nv, Fill::log_uniform_1_16);
  g.dt_bias = src.vector_f32(p + "dt_bias", nv, Fill::ones);
  g.norm = src.vector_f32(p + "norm.weight", dv, Fill::ones);
  g.out = src.matrix(p + "out_proj.weight", H, value_dim);
  return g;
}

LayerWeights load_layer(const ModelConfig& c, WeightSource& src, const std::string& p,
                        MixerKind mixer, FfnKind ffn) {
  LayerWeights l;
  l.mixer = mixer;
  l.ffn = ffn;
  Fill norm_fill = c.zero_centred_norm ? Fill::zeros : Fill::ones;
  l.input_norm = src.vector_f32(p + "input_layernorm.weight", c.hidden_size, norm_fill);
  l.post_norm = src.vector_f32(p + "post_attention_layernorm.weight", c.hidden_size, norm_fill);
  if (mixer == MixerKind::attention) {
    l.attn = load_attention(c, src, p + "self_attn.");
  } else {
    l.gdn = load_deltanet(c, src, p + "linear_attn.");
  }
  if (ffn == FfnKind::moe) {
    l.moe = load_moe(c, src, p + "mlp.");
  } else {
    l.mlp = load_mlp(src, p + "mlp.", c.hidden_size, c.intermediate_size);
  }
  return l;
}

ModelWeights build(const ModelConfig& c, WeightSource& src, bool want_mtp) {
  if (c.attention_bias) {
    throw Error(ErrorKind::unsupported, "attention_bias = true is not supported");
  }
  ModelWeights w;
  std::string prefix = "model.";
  if (src.has("model.language_model.embed_tokens.weight")) prefix = "model.language_model.";
  const int64_t H = c.hidden_size, V = c.vocab_size;
  w.embed = src.matrix(prefix + "embed_tokens.weight", V, H);
  Fill norm_fill = c.zero_centred_norm ? Fill::zeros : Fill::ones;
  w.final_norm = src.vector_f32(prefix + "norm.weight", H, norm_fill);
  if (c.tie_word_embeddings && !src.has("lm_head.weight")) {
    w.lm_head = w.embed;
  } else {
    w.lm_head = src.matrix("lm_head.weight", V, H);
  }
  int64_t attn_index = 0, gdn_index = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights l = load_layer(c, src, prefix + "layers." + std::to_string(i) + ".", c.mixers[i],
                                c.ffns[i]);
    l.state_index = l.mixer == MixerKind::attention ? attn_index++ : gdn_index++;
    w.layers.push_back(std::move(l));
  }
  const bool hybrid = c.arch == Arch::qwen3_next || c.arch == Arch::qwen3_5 ||
                      c.arch == Arch::qwen3_5_moe;
  if (want_mtp && hybrid && src.has("mtp.fc.weight")) {
    MtpWeights m;
    m.fc = src.matrix("mtp.fc.weight", H, 2 * H);
    m.pre_fc_norm_embedding = src.vector_f32("mtp.pre_fc_norm_embedding.weight", H, norm_fill);
    m.pre_fc_norm_hidden = src.vector_f32("mtp.pre_fc_norm_hidden.weight", H, norm_fill);
    m.norm = src.vector_f32("mtp.norm.weight", H, norm_fill);
    FfnKind ffn = c.arch == Arch::qwen3_5 ? FfnKind::dense : FfnKind::moe;
    m.layer = load_layer(c, src, "mtp.layers.0.", MixerKind::attention, ffn);
    m.layer.state_index = attn_index;  // the MTP layer's KV comes after the main layers'
    w.mtp = std::move(m);
  }
  w.owned = std::move(src.owned);
  w.matrix_bytes = src.matrix_bytes;
  return w;
}

}  // namespace

namespace {

template <typename Fn>
void for_each_layer_tensor(LayerWeights& l, Fn&& fn) {
  for (Tensor* t : {&l.input_norm, &l.post_norm, &l.attn.q_norm, &l.attn.k_norm,
                    &l.attn.q_gate_split, &l.gdn.qkvz_order, &l.gdn.ba_order, &l.gdn.conv,
                    &l.gdn.A_log, &l.gdn.dt_bias, &l.gdn.norm}) {
    fn(*t);
  }
  for (Weight* w : {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.o, &l.gdn.qkvz, &l.gdn.ba,
                    &l.gdn.qkv, &l.gdn.z, &l.gdn.b, &l.gdn.a, &l.gdn.out, &l.mlp.gate,
                    &l.mlp.up, &l.mlp.down, &l.moe.router, &l.moe.shared.gate, &l.moe.shared.up,
                    &l.moe.shared.down, &l.moe.shared_gate}) {
    fn(w->w);
    fn(w->scale);
  }
  for (std::vector<Weight>* list : {&l.moe.experts.gate, &l.moe.experts.up, &l.moe.experts.down}) {
    for (Weight& w : *list) {
      fn(w.w);
      fn(w.scale);
    }
  }
}

}  // namespace

namespace {
// Row r of an unscaled f32/bf16/f16 matrix as f32.
void decode_matrix_row(const Weight& w, int64_t r, float* dst) {
  const int64_t K = w.cols();
  const char* src = static_cast<const char*>(w.w.data) + r * w.w.stride[0] * dtype_size(w.w.dtype);
  for (int64_t k = 0; k < K; ++k) {
    switch (w.w.dtype) {
      case DType::f32: dst[k] = reinterpret_cast<const float*>(src)[k]; break;
      case DType::bf16: dst[k] = bf16_to_f32(reinterpret_cast<const uint16_t*>(src)[k]); break;
      case DType::f16: dst[k] = f16_to_f32(reinterpret_cast<const uint16_t*>(src)[k]); break;
      default:
        throw Error(ErrorKind::unsupported,
                    std::string("fp8 conversion of a ") + dtype_name(w.w.dtype) + " matrix");
    }
  }
}
}  // namespace

Weight quantize_fp8(const Weight& w, std::vector<std::shared_ptr<void>>& owned) {
  if (w.empty() || w.w.dtype == DType::f8_e4m3) return w;
  check(w.scale.empty() && w.w.device == Device::cpu, ErrorKind::unsupported,
        "fp8 conversion of a matrix that already has scales");
  const int64_t N = w.rows(), K = w.cols(), B = kFp8Block;
  const int64_t sr = (N + B - 1) / B, sc = (K + B - 1) / B;
  auto codes = std::make_shared<Buffer>(static_cast<size_t>(N * K));
  auto scales = std::make_shared<Buffer>(static_cast<size_t>(sr * sc) * sizeof(float));
  uint8_t* cp = static_cast<uint8_t*>(codes->data());
  float* sp = static_cast<float*>(scales->data());
  default_thread_pool().parallel_for(sr, [&](int64_t br) {
    const int64_t r0 = br * B, r1 = std::min(N, r0 + B);
    std::vector<float> row(K);
    std::vector<float> amax(sc, 0.0f);
    for (int64_t r = r0; r < r1; ++r) {
      decode_matrix_row(w, r, row.data());
      for (int64_t k = 0; k < K; ++k) amax[k / B] = std::max(amax[k / B], std::fabs(row[k]));
    }
    for (int64_t b = 0; b < sc; ++b) sp[br * sc + b] = amax[b] > 0.0f ? amax[b] / 448.0f : 1.0f;
    for (int64_t r = r0; r < r1; ++r) {
      decode_matrix_row(w, r, row.data());
      for (int64_t k = 0; k < K; ++k) cp[r * K + k] = f32_to_f8e4m3(row[k] / sp[br * sc + k / B]);
    }
  });
  owned.push_back(codes);
  owned.push_back(scales);
  Weight q;
  q.w = Tensor(cp, DType::f8_e4m3, {N, K});
  q.scale = Tensor(sp, DType::f32, {sr, sc});
  q.block_rows = B;
  q.block_cols = B;
  return q;
}

void quantize_weights_fp8(ModelWeights& w) {
  auto convert = [&](LayerWeights& l) {
    for (Weight* m : {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.o, &l.gdn.qkvz, &l.gdn.ba,
                      &l.gdn.qkv, &l.gdn.z, &l.gdn.b, &l.gdn.a, &l.gdn.out, &l.mlp.gate,
                      &l.mlp.up, &l.mlp.down, &l.moe.shared.gate, &l.moe.shared.up,
                      &l.moe.shared.down}) {
      *m = quantize_fp8(*m, w.owned);
    }
    for (std::vector<Weight>* list : {&l.moe.experts.gate, &l.moe.experts.up, &l.moe.experts.down}) {
      for (Weight& m : *list) m = quantize_fp8(m, w.owned);
    }
  };
  for (LayerWeights& l : w.layers) convert(l);
  if (w.mtp) {
    w.mtp->fc = quantize_fp8(w.mtp->fc, w.owned);
    convert(w.mtp->layer);
  }
  w.matrix_bytes = count_matrix_bytes(w);
}

size_t count_matrix_bytes(const ModelWeights& w) {
  size_t bytes = 0;
  auto count = [&](const Weight& m, MatrixRole) { bytes += m.nbytes(); };
  for (const LayerWeights& l : w.layers) for_each_matrix(l, count);
  if (w.mtp) {
    for_each_matrix(w.mtp->layer, count);
    bytes += w.mtp->fc.nbytes();
  }
  bytes += w.embed.nbytes();
  if (w.lm_head.w.data != w.embed.w.data) bytes += w.lm_head.nbytes();
  return bytes;
}

namespace {
// True when the matrices can be stacked row-wise into one: same dtype, columns and scale
// layout, contiguous rows, and (scaled) every part but the last a whole number of scale blocks.
bool can_stack(const std::vector<Weight*>& parts) {
  const Weight& a = *parts[0];
  for (size_t i = 0; i < parts.size(); ++i) {
    const Weight& b = *parts[i];
    if (b.w.empty() || !b.w.is_contiguous() || b.w.dtype != a.w.dtype || b.cols() != a.cols() ||
        b.scale.empty() != a.scale.empty() || b.w.device != Device::cpu) {
      return false;
    }
    if (!a.scale.empty()) {
      if (b.scale.dtype != a.scale.dtype || !b.scale.is_contiguous() ||
          b.block_rows != a.block_rows || b.block_cols != a.block_cols ||
          b.scale.shape[1] != a.scale.shape[1] ||
          (i + 1 < parts.size() && b.rows() % b.block_rows != 0)) {
        return false;
      }
    }
  }
  return true;
}

// Copies `parts` (host) into one device matrix [sum of rows, cols]; each part becomes a view of
// its rows, and the stacked matrix is returned (empty when the parts cannot be stacked).
Weight stack_on_device(const std::vector<Weight*>& parts, Device device,
                       std::vector<std::shared_ptr<void>>& owned) {
  if (!can_stack(parts)) return {};
  auto place = [&](auto member) {
    size_t bytes = 0;
    int64_t rows = 0;
    for (Weight* p : parts) {
      bytes += (p->*member).nbytes();
      rows += (p->*member).shape[0];
    }
    auto buf = std::make_shared<Buffer>(bytes, device);
    size_t at = 0;
    for (Weight* p : parts) {
      Tensor& t = p->*member;
      copy_bytes(static_cast<char*>(buf->data()) + at, device, t.data, Device::cpu, t.nbytes());
      t.data = static_cast<char*>(buf->data()) + at;
      t.device = device;
      at += t.nbytes();
    }
    Tensor whole = parts[0]->*member;
    whole.shape[0] = rows;
    whole.data = buf->data();
    owned.push_back(std::move(buf));
    return whole;
  };
  Weight stacked = *parts[0];
  stacked.w = place(&Weight::w);
  if (!parts[0]->scale.empty()) stacked.scale = place(&Weight::scale);
  return stacked;
}

// Whether two matrices are stored alike (shape, dtype, row stride, 16-byte alignment, scale
// layout): interchangeable in one grouped launch, which describes every matrix by the first.
bool stored_alike(const Weight& a, const Weight& b) {
  auto aligned = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data) % 16 == 0; };
  return !a.empty() && !b.empty() && a.w.dtype == b.w.dtype && a.rows() == b.rows() &&
         a.cols() == b.cols() && a.w.stride[0] == b.w.stride[0] && aligned(a.w) == aligned(b.w) &&
         a.scale.empty() == b.scale.empty() &&
         (a.scale.empty() ||
          (a.scale.dtype == b.scale.dtype && a.scale.stride[0] == b.scale.stride[0] &&
           a.block_rows == b.block_rows && a.block_cols == b.block_cols));
}

// MoeWeights::with_shared, where the shared expert is stored like the routed ones and this
// rank holds all E experts (expert parallelism keeps a block: the shared expert stays apart).
void fold_shared_expert(MoeWeights& m) {
  m.with_shared = ExpertWeights{};
  const ExpertWeights& ex = m.experts;
  const MlpWeights& sh = m.shared;
  if (ex.gate.empty() || sh.gate.empty() || m.shared_gate.empty() ||
      static_cast<int64_t>(ex.gate.size()) != m.router.rows()) {
    return;
  }
  if (!stored_alike(ex.gate[0], sh.gate) || !stored_alike(ex.up[0], sh.up) ||
      !stored_alike(ex.down[0], sh.down) || ex.gate_up.empty() != sh.gate_up.empty() ||
      (!ex.gate_up.empty() && !stored_alike(ex.gate_up[0], sh.gate_up))) {
    return;
  }
  m.with_shared.gate = ex.gate;
  m.with_shared.up = ex.up;
  m.with_shared.down = ex.down;
  m.with_shared.gate_up = ex.gate_up;
  m.with_shared.gate.push_back(sh.gate);
  m.with_shared.up.push_back(sh.up);
  m.with_shared.down.push_back(sh.down);
  if (!sh.gate_up.empty()) m.with_shared.gate_up.push_back(sh.gate_up);
}
}  // namespace

void fold_shared_experts(ModelWeights& w) {
  for (LayerWeights& l : w.layers) fold_shared_expert(l.moe);
  if (w.mtp) fold_shared_expert(w.mtp->layer.moe);
}

void move_weights(ModelWeights& w, Device device) {
  if (device == Device::cpu) return;
  // (host pointer, bytes) -> device copy, so views of the same bytes (tied embeddings) share it.
  std::map<std::pair<const void*, size_t>, void*> copies;
  std::vector<std::shared_ptr<void>> owned;
  auto move = [&](Tensor& t) {
    if (t.empty() || t.device == device) return;
    check(t.is_contiguous(), ErrorKind::internal, "move_weights: a strided weight tensor");
    const auto key = std::make_pair(static_cast<const void*>(t.data), t.nbytes());
    auto it = copies.find(key);
    if (it == copies.end()) {
      auto buf = std::make_shared<Buffer>(t.nbytes(), device);
      copy_bytes(buf->data(), device, t.data, Device::cpu, t.nbytes());
      it = copies.emplace(key, buf->data()).first;
      owned.push_back(std::move(buf));
    }
    t.data = it->second;
    t.device = device;
  };
  for (Tensor* t : {&w.embed.w, &w.embed.scale, &w.lm_head.w, &w.lm_head.scale, &w.final_norm}) {
    move(*t);
  }
  // Projections that read the same input are stacked, so one launch streams them all: q, k, v
  // of attention layers, gate and up of MLPs (and of the shared expert).
  auto stack = [&](LayerWeights& l) {
    if (l.mixer == MixerKind::attention) {
      l.attn.qkv = stack_on_device({&l.attn.q, &l.attn.k, &l.attn.v}, device, owned);
    }
    if (!l.gdn.qkvz.empty() && l.gdn.qkvz_order.empty() && l.gdn.ba_order.empty()) {
      l.gdn.qkvz_ba = stack_on_device({&l.gdn.qkvz, &l.gdn.ba}, device, owned);
    }
    l.mlp.gate_up = stack_on_device({&l.mlp.gate, &l.mlp.up}, device, owned);
    l.moe.shared.gate_up = stack_on_device({&l.moe.shared.gate, &l.moe.shared.up}, device, owned);
    if (!l.moe.router.empty() && !l.moe.shared_gate.empty()) {
      l.moe.router_gate = stack_on_device({&l.moe.router, &l.moe.shared_gate}, device, owned);
    }
    // Routed experts: [gate_0 ; up_0 ; gate_1 ; up_1 ...] in one buffer, each expert's pair
    // then read as one [2 * intermediate, hidden] matrix.
    ExpertWeights& ex = l.moe.experts;
    std::vector<Weight*> pairs;
    for (size_t e = 0; e < ex.gate.size(); ++e) {
      pairs.push_back(&ex.gate[e]);
      pairs.push_back(&ex.up[e]);
    }
    if (!pairs.empty() && !stack_on_device(pairs, device, owned).w.empty()) {
      ex.gate_up.clear();
      for (size_t e = 0; e < ex.gate.size(); ++e) {
        Weight both = ex.gate[e];
        both.w.shape[0] += ex.up[e].w.shape[0];
        if (!both.scale.empty()) both.scale.shape[0] += ex.up[e].scale.shape[0];
        ex.gate_up.push_back(both);
      }
    }
  };
  for (LayerWeights& l : w.layers) {
    stack(l);
    for_each_layer_tensor(l, move);
  }
  if (w.mtp) {
    stack(w.mtp->layer);
    for (Tensor* t : {&w.mtp->fc.w, &w.mtp->fc.scale, &w.mtp->pre_fc_norm_embedding,
                      &w.mtp->pre_fc_norm_hidden, &w.mtp->norm}) {
      move(*t);
    }
    for_each_layer_tensor(w.mtp->layer, move);
  }
  w.owned = std::move(owned);
}

ModelWeights load_weights(const ModelConfig& config, std::shared_ptr<Checkpoint> checkpoint,
                          const LoadOptions& options) {
  auto src = make_checkpoint_source(std::move(checkpoint));
  ModelWeights w = build(config, *src, options.load_mtp);
  if (options.fp8) quantize_weights_fp8(w);
  return w;
}

ModelWeights make_dummy_weights(const ModelConfig& config, DType dtype, uint64_t seed,
                                bool with_mtp, bool pooled) {
  auto src = make_dummy_source(dtype, seed, with_mtp, pooled);
  return build(config, *src, with_mtp);
}

}  // namespace hibana
