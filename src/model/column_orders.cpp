#include "model/column_orders.h"

namespace hibana {

std::vector<int32_t> q_gate_order(int64_t heads, int64_t head_dim) {
  std::vector<int32_t> idx;
  for (int part = 0; part < 2; ++part) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t d = 0; d < head_dim; ++d) {
        idx.push_back(static_cast<int32_t>(h * 2 * head_dim + part * head_dim + d));
      }
    }
  }
  return idx;
}

std::vector<int32_t> qkvz_order(int64_t key_heads, int64_t key_dim, int64_t r, int64_t value_dim) {
  const int64_t W = 2 * key_dim + 2 * r * value_dim;
  std::vector<int32_t> idx;
  auto add = [&](int64_t offset, int64_t width) {
    for (int64_t g = 0; g < key_heads; ++g) {
      for (int64_t d = 0; d < width; ++d) idx.push_back(static_cast<int32_t>(g * W + offset + d));
    }
  };
  add(0, key_dim);                                  // q
  add(key_dim, key_dim);                            // k
  add(2 * key_dim, r * value_dim);                  // v
  add(2 * key_dim + r * value_dim, r * value_dim);  // z
  return idx;
}

std::vector<int32_t> ba_order(int64_t key_heads, int64_t r) {
  std::vector<int32_t> idx;
  for (int part = 0; part < 2; ++part) {
    for (int64_t g = 0; g < key_heads; ++g) {
      for (int64_t j = 0; j < r; ++j) idx.push_back(static_cast<int32_t>(g * 2 * r + part * r + j));
    }
  }
  return idx;
}

Tensor index_tensor(const std::vector<int32_t>& index, std::vector<std::shared_ptr<void>>& owned) {
  auto buf = std::make_shared<std::vector<int32_t>>(index);
  owned.push_back(buf);
  return Tensor(buf->data(), DType::i32, {static_cast<int64_t>(buf->size())});
}

}  // namespace hibana
