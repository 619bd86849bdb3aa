// Cutting whole-model weights down to one rank's part (see shard_plan.h).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/column_orders.h"
#include "model/shard_plan.h"

namespace hibana {

namespace {

using Owned = std::vector<std::shared_ptr<void>>;

// Joins parts that touch, so contiguous rows stay one view.
std::vector<Range> merged(const std::vector<Range>& parts) {
  std::vector<Range> out;
  for (const Range& p : parts) {
    if (p.size() == 0) continue;
    if (!out.empty() && out.back().end == p.begin) {
      out.back().end = p.end;
    } else {
      out.push_back(p);
    }
  }
  return out;
}

// Bytes of one row of t (its dimensions after the first, contiguous).
size_t row_bytes(const Tensor& t) {
  return static_cast<size_t>(t.shape[0] == 0 ? 0 : t.numel() / t.shape[0]) * dtype_size(t.dtype);
}

// Rows `parts` of a host tensor, one after another: a view for one part, else a copy.
Tensor take_rows(const Tensor& t, const std::vector<Range>& parts, Owned& owned) {
  if (parts.size() == 1) return t.slice_rows(parts[0].begin, parts[0].end);
  int64_t rows = 0;
  for (const Range& p : parts) rows += p.size();
  const size_t rb = row_bytes(t);
  auto buf = std::make_shared<Buffer>(std::max<size_t>(rb * rows, 1));
  char* dst = static_cast<char*>(buf->data());
  for (const Range& p : parts) {
    for (int64_t r = p.begin; r < p.end; ++r, dst += rb) std::memcpy(dst, t.row<char>(r), rb);
  }
  Tensor out = t;
  out.data = buf->data();
  out.shape[0] = rows;
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {  // contiguous strides
    out.stride[i] = stride;
    stride *= out.shape[i];
  }
  owned.push_back(std::move(buf));
  return out;
}

// Columns `cols` of a 2-D host tensor, copied.
Tensor take_columns(const Tensor& t, Range cols, Owned& owned) {
  const size_t es = dtype_size(t.dtype), n = static_cast<size_t>(cols.size());
  auto buf = std::make_shared<Buffer>(std::max<size_t>(n * es * t.shape[0], 1));
  char* dst = static_cast<char*>(buf->data());
  for (int64_t r = 0; r < t.shape[0]; ++r, dst += n * es) {
    std::memcpy(dst, t.row<char>(r) + cols.begin * es, n * es);
  }
  Tensor out(buf->data(), t.dtype, {t.shape[0], cols.size()});
  owned.push_back(std::move(buf));
  return out;
}

// The scale blocks covering `parts` of a dimension of `n` cut in blocks of `block`; throws when a
// cut falls inside a block.
std::vector<Range> scale_parts(const std::vector<Range>& parts, int64_t n, int64_t block,
                               const std::string& what) {
  std::vector<Range> out;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Range& p = parts[i];
    const bool end_ok = p.end % block == 0 || (i + 1 == parts.size() && p.end == n);
    check(p.begin % block == 0 && end_ok, ErrorKind::unsupported,
          "tensor parallelism would cut " + what + " inside an fp8 scale block of " +
              std::to_string(block));
    out.push_back({p.begin / block, (p.end + block - 1) / block});
  }
  return out;
}

class Cutter {
 public:
  Cutter(const ModelConfig& c, const ShardPlan& plan, Owned& owned)
      : c_(c), plan_(plan), owned_(owned) {}

  Weight rows(const Weight& w, std::vector<Range> parts, const std::string& what) {
    parts = merged(parts);
    if (w.empty() || (parts.size() == 1 && parts[0] == Range{0, w.rows()})) return w;
    Weight out = w;
    out.w = take_rows(w.w, parts, owned_);
    if (!w.scale.empty()) {
      out.scale = take_rows(w.scale, scale_parts(parts, w.rows(), w.block_rows, what), owned_);
    }
    return out;
  }
  Weight columns(const Weight& w, Range cols, const std::string& what) {
    if (w.empty() || cols == Range{0, w.cols()}) return w;
    Weight out = w;
    out.w = take_columns(w.w, cols, owned_);
    if (!w.scale.empty()) {
      out.scale =
          take_columns(w.scale, scale_parts({cols}, w.cols(), w.block_cols, what)[0], owned_);
    }
    return out;
  }
  Tensor vector_rows(const Tensor& t, std::vector<Range> parts) {
    return take_rows(t, merged(parts), owned_);
  }

  void attention(AttentionWeights& a) {
    const HeadSplit& s = plan_.attention;
    const int64_t hd = c_.head_dim, qh = hd * (c_.attention_output_gate ? 2 : 1);
    a.q = rows(a.q, {{s.heads.begin * qh, s.heads.end * qh}}, "q_proj");
    a.k = rows(a.k, {{s.kv_heads.begin * hd, s.kv_heads.end * hd}}, "k_proj");
    a.v = rows(a.v, {{s.kv_heads.begin * hd, s.kv_heads.end * hd}}, "v_proj");
    a.o = columns(a.o, {s.heads.begin * hd, s.heads.end * hd}, "o_proj");
    if (c_.attention_output_gate) {
      a.q_gate_split = index_tensor(q_gate_order(s.heads.size(), hd), owned_);
    }
  }

  void deltanet(DeltaNetWeights& g) {
    const Range kh = plan_.deltanet.kv_heads, vh = plan_.deltanet.heads;
    const int64_t nk = c_.linear_key_heads, dk = c_.linear_key_dim, dv = c_.linear_value_dim;
    const int64_t r = c_.linear_value_heads / nk, r_local = vh.size() / kh.size();
    // Conv channels (and in_proj_qkv rows): [q of key heads | k of key heads | v of value heads].
    const std::vector<Range> channels = {{kh.begin * dk, kh.end * dk},
                                         {(nk + kh.begin) * dk, (nk + kh.end) * dk},
                                         {2 * nk * dk + vh.begin * dv, 2 * nk * dk + vh.end * dv}};
    if (!g.qkvz.empty()) {  // packed per key head: [q | k | v (r heads) | z (r heads)], [b | a]
      std::vector<Range> qkvz, ba;
      const int64_t W = 2 * dk + 2 * r * dv;
      for (int64_t k = kh.begin; k < kh.end; ++k) {
        const int64_t j0 = std::max<int64_t>(vh.begin - k * r, 0), j1 = std::min(vh.end - k * r, r);
        const int64_t v0 = k * W + 2 * dk, z0 = v0 + r * dv;
        qkvz.insert(
            qkvz.end(),
            {{k * W, k * W + 2 * dk}, {v0 + j0 * dv, v0 + j1 * dv}, {z0 + j0 * dv, z0 + j1 * dv}});
        ba.insert(ba.end(),
                  {{k * 2 * r + j0, k * 2 * r + j1}, {k * 2 * r + r + j0, k * 2 * r + r + j1}});
      }
      g.qkvz = rows(g.qkvz, qkvz, "in_proj_qkvz");
      g.ba = rows(g.ba, ba, "in_proj_ba");
      g.qkvz_order = index_tensor(qkvz_order(kh.size(), dk, r_local, dv), owned_);
      g.ba_order = index_tensor(ba_order(kh.size(), r_local), owned_);
    } else {
      g.qkv = rows(g.qkv, channels, "in_proj_qkv");
      g.z = rows(g.z, {{vh.begin * dv, vh.end * dv}}, "in_proj_z");
      g.b = rows(g.b, {vh}, "in_proj_b");
      g.a = rows(g.a, {vh}, "in_proj_a");
    }
    g.conv = vector_rows(g.conv, channels);
    g.A_log = vector_rows(g.A_log, {vh});
    g.dt_bias = vector_rows(g.dt_bias, {vh});
    g.out = columns(g.out, {vh.begin * dv, vh.end * dv}, "out_proj");
  }

  void mlp(MlpWeights& m, Range inter, const std::string& what) {
    m.gate = rows(m.gate, {inter}, what + " gate_proj");
    m.up = rows(m.up, {inter}, what + " up_proj");
    m.down = columns(m.down, inter, what + " down_proj");
  }

  void moe(MoeWeights& m) {
    if (plan_.expert_parallel) {  // only the rank's block of whole experts
      const Range keep = plan_.experts;
      check(m.first_expert == 0 && static_cast<int64_t>(m.experts.gate.size()) == c_.num_experts &&
                keep.end <= c_.num_experts,
            ErrorKind::internal, "expert parallelism: the MoE layer does not hold every expert");
      for (std::vector<Weight>* list : {&m.experts.gate, &m.experts.up, &m.experts.down}) {
        *list = std::vector<Weight>(list->begin() + keep.begin, list->begin() + keep.end);
      }
      m.experts.gate_up.clear();  // stacked on a GPU only, after this
      m.first_expert = keep.begin;
    }
    for (size_t e = 0; e < m.experts.gate.size(); ++e) {
      m.experts.gate[e] = rows(m.experts.gate[e], {plan_.expert}, "an expert's gate_proj");
      m.experts.up[e] = rows(m.experts.up[e], {plan_.expert}, "an expert's up_proj");
      m.experts.down[e] = columns(m.experts.down[e], plan_.expert, "an expert's down_proj");
    }
    if (!m.shared.gate.empty()) mlp(m.shared, plan_.shared_expert, "the shared expert's");
  }

  void layer(LayerWeights& l) {
    if (l.mixer == MixerKind::attention) {
      attention(l.attn);
    } else {
      deltanet(l.gdn);
    }
    if (l.ffn == FfnKind::moe) {
      moe(l.moe);
    } else {
      mlp(l.mlp, plan_.mlp, "the MLP's");
    }
  }

 private:
  const ModelConfig& c_;
  const ShardPlan& plan_;
  Owned& owned_;
};

}  // namespace

void shard_weights(ModelWeights& w, const ModelConfig& c, const ShardPlan& plan) {
  if (plan.ranks == 1) return;
  Cutter cut(c, plan, w.owned);
  const bool tied = w.lm_head.w.data == w.embed.w.data;
  w.embed = cut.rows(w.embed, {plan.vocab}, "the embedding");
  w.lm_head = tied ? w.embed : cut.rows(w.lm_head, {plan.vocab}, "lm_head");
  for (LayerWeights& l : w.layers) cut.layer(l);
  // The MTP head's decoder layer like the others; its fc and norms stay whole.
  if (w.mtp) cut.layer(w.mtp->layer);
  w.matrix_bytes = count_matrix_bytes(w);
}

}  // namespace hibana
