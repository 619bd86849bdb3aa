// The shared expert computed beside the routed experts (MoeWeights::with_shared: pair k of every
// token, weight sigmoid(gate)) gives the MoE block's output as computed apart (an MLP scaled by
// its gate and added), on each device, in bf16 and in fp8 with 128 x 128 block scales (the
// Qwen3-Next-80B case); it is taken only where the shared expert is stored like the routed
// experts, and a token's output does not depend on the batch it is in.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "core/device_memory.h"
#include "core/numeric.h"
#include "model/layers.h"
#include "model/weights.h"
#include "support/fixture_model.h"
#include "support/random.h"

namespace hibana {
namespace {

constexpr int64_t kE = 6, kK = 2, kH = 128, kI = 128;

using Param = std::tuple<std::string, bool>;  // device, fp8

class SharedExpertFold : public testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const auto& [device, fp8] = GetParam();
    if (test::unavailable(device)) GTEST_SKIP();
    be = device == "cuda" ? make_cuda_backend() : make_cpu_backend();
    c.hidden_size = kH;
    c.num_experts = kE;
    c.experts_per_token = kK;
    c.norm_topk_prob = true;
  }
  // A bf16 [rows, cols] matrix of random values (seeded), kept alive by the fixture.
  Weight matrix(int64_t rows, int64_t cols, uint32_t seed) {
    const auto v = test::randn(rows * cols, seed, 0.1f);
    auto& bytes = keep.emplace_back(rows * cols);
    for (int64_t i = 0; i < rows * cols; ++i) bytes[i] = f32_to_bf16(v[i]);
    Weight w;
    w.w = Tensor(bytes.data(), DType::bf16, {rows, cols});
    return w;
  }
  // One MoE layer's weights with a shared expert of intermediate size `shared_inter`.
  ModelWeights layer(int64_t shared_inter) {
    ModelWeights mw;
    LayerWeights& l = mw.layers.emplace_back();
    l.ffn = FfnKind::moe;
    MoeWeights& m = l.moe;
    m.router = matrix(kE, kH, 1);
    for (int64_t e = 0; e < kE; ++e) {
      m.experts.gate.push_back(matrix(kI, kH, static_cast<uint32_t>(10 + 3 * e)));
      m.experts.up.push_back(matrix(kI, kH, static_cast<uint32_t>(11 + 3 * e)));
      m.experts.down.push_back(matrix(kH, kI, static_cast<uint32_t>(12 + 3 * e)));
    }
    m.shared.gate = matrix(shared_inter, kH, 100);
    m.shared.up = matrix(shared_inter, kH, 101);
    m.shared.down = matrix(kH, shared_inter, 102);
    m.shared_gate = matrix(1, kH, 103);
    if (std::get<1>(GetParam())) quantize_weights_fp8(mw);  // (router and gate stay bf16)
    move_weights(mw, be->device());
    fold_shared_experts(mw);
    return mw;
  }
  // The layer's MoE output for the first T rows of x, on the backend's device.
  std::vector<float> run(const MoeWeights& m, const std::vector<float>& x, int64_t T) {
    Buffer xb(T * kH * sizeof(float), be->device()), ob(T * kH * sizeof(float), be->device());
    Tensor xt(xb.data(), DType::f32, {T, kH}, be->device());
    Tensor ot(ob.data(), DType::f32, {T, kH}, be->device());
    copy_from_host(x.data(), xt);
    layers::moe(c, m, *be, xt, ot);
    std::vector<float> out(T * kH);
    copy_to_host(ot, out.data());
    return out;
  }

  std::unique_ptr<Backend> be;
  ModelConfig c;
  std::vector<std::vector<uint16_t>> keep;
};

TEST_P(SharedExpertFold, MatchesTheSharedExpertComputedApart) {
  ModelWeights mw = layer(kI);
  MoeWeights& m = mw.layers[0].moe;
  ASSERT_EQ(m.with_shared.gate.size(), static_cast<size_t>(kE + 1));
  const int64_t T = 9;
  const auto x = test::randn(T * kH, 7);
  const std::vector<float> folded = run(m, x, T);
  MoeWeights apart = m;
  apart.with_shared = ExpertWeights{};
  const std::vector<float> ref = run(apart, x, T);
  float worst = 0.0f;
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(folded[i] - ref[i]));
  EXPECT_LT(worst, 1e-5f);
  float largest = 0.0f;
  for (float v : ref) largest = std::max(largest, std::fabs(v));
  EXPECT_GT(largest, 1e-3f);  // (an output of zeros would match too)
  // A token's bits alone and in the batch.
  for (int64_t n : {1, 4}) {
    const std::vector<float> part = run(m, x, n);
    EXPECT_EQ(std::memcmp(part.data(), folded.data(), n * kH * sizeof(float)), 0) << n << " rows";
  }
}

TEST_P(SharedExpertFold, OnlyWhereStoredLikeTheRoutedExperts) {
  ModelWeights mw = layer(2 * kI);  // a wider shared expert cannot join the routed launches
  EXPECT_TRUE(mw.layers[0].moe.with_shared.gate.empty());
}

INSTANTIATE_TEST_SUITE_P(Devices, SharedExpertFold,
                         testing::Combine(testing::ValuesIn(test::test_devices()),
                                          testing::Bool()));

}  // namespace
}  // namespace hibana
