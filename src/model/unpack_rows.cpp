// Packed projections reordered at load: a matmul's output column j is the product with weight
// row j, so regrouping the output columns (gather_columns with a map) after every matmul is the
// same as regrouping the weight rows once. Done where the map keeps every row's scale block
// (block-scaled weights: each block of rows must come from one source block); otherwise the
// map stays and the layers gather as before.
#include <cstring>
#include <vector>

#include "core/error.h"
#include "model/weights.h"

namespace hibana {

namespace {

// Rows of `t` ([rows, ...], contiguous) in the order `order` (new row j = old row order[j]),
// in new memory kept alive by `owned`.
Tensor reorder_rows(const Tensor& t, const std::vector<int64_t>& order,
                    std::vector<std::shared_ptr<void>>& owned) {
  const size_t row_bytes = t.nbytes() / static_cast<size_t>(t.shape[0]);
  auto buf = std::make_shared<std::vector<unsigned char>>(t.nbytes());
  const auto* src = static_cast<const unsigned char*>(t.data);
  for (size_t j = 0; j < order.size(); ++j) {
    std::memcpy(buf->data() + j * row_bytes, src + static_cast<size_t>(order[j]) * row_bytes,
                row_bytes);
  }
  Tensor out = t;
  out.data = buf->data();
  owned.push_back(std::move(buf));
  return out;
}

// Reorders w's rows by `map` (an i32 tensor on the host, one entry per row) and empties the map;
// leaves both alone when the map cannot be folded into the weight.
void fold(Weight& w, Tensor& map, std::vector<std::shared_ptr<void>>& owned) {
  if (w.empty() || map.empty() || map.device != Device::cpu || w.w.device != Device::cpu ||
      !w.w.is_contiguous() || map.numel() != w.rows()) {
    return;
  }
  const auto* m = map.ptr<int32_t>();
  const int64_t rows = w.rows();
  std::vector<int64_t> order(static_cast<size_t>(rows));
  for (int64_t j = 0; j < rows; ++j) {
    if (m[j] < 0 || m[j] >= rows) return;
    order[static_cast<size_t>(j)] = m[j];
  }
  std::vector<int64_t> scale_order;
  if (!w.scale.empty()) {
    const int64_t br = w.block_rows;
    if (br <= 0 || !w.scale.is_contiguous()) return;
    for (int64_t j = 0; j < rows; ++j) {  // every row of a new block from one old block
      if (order[j] / br != order[(j / br) * br] / br) return;
    }
    for (int64_t b = 0; b * br < rows; ++b) scale_order.push_back(order[b * br] / br);
    if (static_cast<int64_t>(scale_order.size()) != w.scale.shape[0]) return;
  }
  w.w = reorder_rows(w.w, order, owned);
  if (!w.scale.empty()) w.scale = reorder_rows(w.scale, scale_order, owned);
  map = Tensor();
}

void unpack_layer(LayerWeights& l, std::vector<std::shared_ptr<void>>& owned) {
  fold(l.attn.q, l.attn.q_gate_split, owned);
  fold(l.gdn.qkvz, l.gdn.qkvz_order, owned);
  fold(l.gdn.ba, l.gdn.ba_order, owned);
}

}  // namespace

void unpack_projections(ModelWeights& w) {
  for (LayerWeights& l : w.layers) unpack_layer(l, w.owned);
  if (w.mtp) unpack_layer(w.mtp->layer, w.owned);
}

}  // namespace hibana
