// Expert parallelism, checked the same way on every backend: the experts of `all` (four, on the
// backend's device) split into two blocks of two; each block's moe_keep_experts turns the ids of
// the other block's experts into -1 (weight 0) and its own into local indices, its moe_experts
// skips the -1 pairs and writes every element (a token whose experts are all elsewhere gets
// exactly 0, not what the buffer held), and the two blocks' outputs add up to the whole op's.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/device_memory.h"
#include "support/random.h"

namespace hibana::test {

inline void expect_expert_blocks_add_up(Backend& be, const ExpertWeights& all, int64_t H) {
  const int64_t T = 5, k = 2;
  const Device dev = be.device();
  std::vector<std::unique_ptr<Buffer>> keep;
  auto on_device = [&](const void* data, DType dtype, int64_t rows, int64_t cols) {
    Tensor t(nullptr, dtype, {rows, cols}, dev);
    keep.push_back(std::make_unique<Buffer>(t.nbytes(), dev));
    t.data = keep.back()->data();
    copy_from_host(data, t);
    return t;
  };
  auto to_host = [](const Tensor& t, auto& out) { copy_to_host(t, out.data()); };
  const std::vector<float> x = randn(static_cast<size_t>(T * H), 99);
  // Tokens 0 and 1 use experts of both blocks, token 2 only block 0's, tokens 3 and 4 block 1's.
  const std::vector<int32_t> ids = {0, 3, 2, 1, 1, 0, 3, 2, 2, 3};
  const std::vector<float> w = {0.6f, 0.4f, 0.7f, 0.3f, 0.5f, 0.5f, 0.9f, 0.1f, 0.2f, 0.8f};
  const std::vector<float> nan(static_cast<size_t>(T * H), std::nanf(""));
  const Tensor xt = on_device(x.data(), DType::f32, T, H);
  std::vector<float> whole(T * H), sum(T * H, 0.0f), part(T * H);
  Tensor whole_t = on_device(nan.data(), DType::f32, T, H);
  be.moe_experts(xt, on_device(ids.data(), DType::i32, T, k), on_device(w.data(), DType::f32, T, k),
                 all, whole_t);
  to_host(whole_t, whole);
  for (int64_t first : {0, 2}) {
    SCOPED_TRACE(testing::Message() << "experts " << first << ".." << first + 1);
    ExpertWeights mine;
    for (int64_t e = first; e < first + 2; ++e) {
      mine.gate.push_back(all.gate[e]);
      mine.up.push_back(all.up[e]);
      mine.down.push_back(all.down[e]);
    }
    const Tensor id_t = on_device(ids.data(), DType::i32, T, k);
    const Tensor w_t = on_device(w.data(), DType::f32, T, k);
    be.moe_keep_experts(id_t, w_t, first, 2);
    std::vector<int32_t> id(T * k);
    std::vector<float> wt(T * k);
    to_host(id_t, id);
    to_host(w_t, wt);
    for (int64_t i = 0; i < T * k; ++i) {
      const bool owned = ids[i] >= first && ids[i] < first + 2;
      EXPECT_EQ(id[i], owned ? ids[i] - first : -1) << "pair " << i;
      EXPECT_EQ(wt[i], owned ? w[i] : 0.0f) << "pair " << i;
    }
    const Tensor part_t = on_device(nan.data(), DType::f32, T, H);  // every element written
    be.moe_experts(xt, id_t, w_t, mine, part_t);
    to_host(part_t, part);
    for (int64_t i = 0; i < T * H; ++i) sum[i] += part[i];
    for (int64_t c = 0; c < H; ++c) {
      EXPECT_NE(part[c], whole[c]);  // token 0: one expert of each block
      // Token 2 is all block 0's (the same additions as the whole op), tokens 3, 4 block 1's.
      EXPECT_EQ(part[2 * H + c], first == 0 ? whole[2 * H + c] : 0.0f) << c;
      EXPECT_EQ(part[3 * H + c], first == 0 ? 0.0f : whole[3 * H + c]) << c;
    }
  }
  for (int64_t i = 0; i < T * H; ++i) EXPECT_NEAR(sum[i], whole[i], 1e-5f) << "element " << i;
}

}  // namespace hibana::test
