// unpack_projections: a packed projection's column map folded into its weight rows (row j of
// the result = row map[j]), scale rows moved with their blocks, and the map left in place
// where a block-scaled weight's blocks would be split.
#include <gtest/gtest.h>

#include <vector>

#include "model/weights.h"

namespace hibana {
namespace {

struct Matrix {
  std::vector<float> w;
  std::vector<float> scale;
  std::vector<int32_t> map;
};

// rows x 2 matrix with row r = (r, 10 r); block scales of `block` rows = (100 b) when block > 0.
Matrix make(int64_t rows, int64_t block, std::vector<int32_t> map, Weight& w, Tensor& t) {
  Matrix m;
  // (push_back, not insert of a list: g++ 12 warns of an overflow there that is not one)
  for (int64_t r = 0; r < rows; ++r) {
    m.w.push_back(static_cast<float>(r));
    m.w.push_back(10.0f * r);
  }
  m.map = std::move(map);
  w.w = Tensor(m.w.data(), DType::f32, {rows, 2});
  if (block > 0) {
    for (int64_t b = 0; b * block < rows; ++b) m.scale.push_back(100.0f * b);
    w.scale = Tensor(m.scale.data(), DType::f32, {static_cast<int64_t>(m.scale.size()), 1});
    w.block_rows = block;
    w.block_cols = 2;
  }
  t = Tensor(m.map.data(), DType::i32, {static_cast<int64_t>(m.map.size())});
  return m;
}

float at(const Tensor& t, int64_t i) { return t.ptr<float>()[i]; }

TEST(UnpackProjections, FoldsMapsIntoRowsAndMovesScaleBlocksWithThem) {
  ModelWeights mw;
  mw.layers.resize(1);
  LayerWeights& l = mw.layers[0];
  // qkvz: unscaled, any map folds.
  Matrix a = make(4, 0, {2, 0, 3, 1}, l.gdn.qkvz, l.gdn.qkvz_order);
  // q: blocks of 2 rows swapped whole, rows inside a block reordered: folds.
  Matrix b = make(4, 2, {3, 2, 0, 1}, l.attn.q, l.attn.q_gate_split);
  // ba: a map mixing rows of two blocks into one: stays a map.
  Matrix c = make(4, 2, {0, 2, 1, 3}, l.gdn.ba, l.gdn.ba_order);
  unpack_projections(mw);

  EXPECT_TRUE(l.gdn.qkvz_order.empty());
  const std::vector<int> want_a = {2, 0, 3, 1};
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(at(l.gdn.qkvz.w, 2 * j), want_a[j]);
    EXPECT_EQ(at(l.gdn.qkvz.w, 2 * j + 1), 10.0f * want_a[j]);
  }
  EXPECT_EQ(a.w[2], 1.0f);  // the source is left as it was (new memory)

  EXPECT_TRUE(l.attn.q_gate_split.empty());
  const std::vector<int> want_b = {3, 2, 0, 1};
  for (int j = 0; j < 4; ++j) EXPECT_EQ(at(l.attn.q.w, 2 * j), want_b[j]);
  EXPECT_EQ(at(l.attn.q.scale, 0), 100.0f);  // new block 0 = old block 1
  EXPECT_EQ(at(l.attn.q.scale, 1), 0.0f);

  EXPECT_FALSE(l.gdn.ba_order.empty());
  EXPECT_EQ(l.gdn.ba.w.data, c.w.data());
  (void)b;
}

}  // namespace
}  // namespace hibana
