// The prefill matmul's tiled kernel (matmul_tiled.cu) with its activations split beforehand
// (HIBANA_CUDA_TILED_PRESPLIT: three bf16 planes stored in fragment order, read with ldmatrix)
// against the in-kernel split it replaces, and with its empty token tiles' products skipped or
// run: the same bits, plain and grouped. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/device_memory.h"
#include "support/cuda_fixture.h"
#include "support/cuda_weights.h"
#include "support/random.h"
#include "support/scoped_env.h"

namespace hibana {
namespace {

using test::ExpertSet;
using test::make_experts;
using test::make_weight;
using test::randn;
using test::ScopedEnv;
using test::TestWeight;

class CudaTiledMatmul : public test::CudaFixture {};

// Plain products of 150 rows (two full token tiles and a partial one) and 300 weight rows (a
// partial row tile): bf16 and block-scaled fp8 rows that end inside a stage (72, 208), and rows of
// four 512-long splits (2048). x sits in a wider buffer whose columns past K are NaN: neither way
// reads them. Outputs start as NaN, so a tile neither way writes fails against the CPU. Before
// the pre-split pass, one over NaN activations 64 columns wider leaves NaN planes in the pool
// that hands the next planes out: the pass must write the zeros past K itself.
TEST_F(CudaTiledMatmul, PresplitActivationsGiveTheBitsOfTheInKernelSplit) {
  for (auto [dtype, K] : {std::pair{DType::bf16, int64_t{72}},
                          {DType::f8_e4m3, int64_t{208}},
                          {DType::bf16, int64_t{2048}},
                          {DType::f8_e4m3, int64_t{2048}}}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " K=" + std::to_string(K));
    const int64_t N = 300, M = 150;
    const std::vector<float> x = randn(M * K, 21);
    const Tensor xd = upload_fenced(x, M, K);
    const TestWeight w = make_weight(*this, dtype, N, K, 22);
    std::vector<float> ref(M * N);
    cpu->matmul(Tensor(const_cast<float*>(x.data()), DType::f32, {M, K}), w.host,
                Tensor(ref.data(), DType::f32, {M, N}));
    const std::vector<float> nan_x(M * (K + 64), std::nanf(""));
    const Tensor nan_xd = upload(nan_x.data(), DType::f32, {M, K + 64});
    const TestWeight wide = make_weight(*this, dtype, N, K + 64, 23);
    Tensor junk = device_f32(M, N);
    std::vector<float> got[2];
    for (bool pre : {false, true}) {
      ScopedEnv knob("HIBANA_CUDA_TILED_PRESPLIT", pre ? "1" : "0");
      Tensor out = device_f32(M, N, std::nanf(""));
      if (pre) gpu->matmul(nan_xd, wide.dev, junk);
      gpu->matmul(xd, w.dev, out);
      got[pre] = download(out);
      EXPECT_LT(max_abs_diff(got[pre], ref), 2e-4f) << (pre ? "pre-split" : "in-kernel split");
    }
    EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), M * N * sizeof(float)), 0)
        << "the pre-split activations change the bits";
  }
}

// GPUs with 99 KiB of shared memory a block (DGX Spark's GB10, sm_86/89/120) cannot hold the
// bf16 tiles' three stages (120 KiB): two stages, the same bits (fp8's three fit; at 90 KiB both
// formats and both splitting ways take two); with less still (60000 bytes), the small-batch
// kernel takes the product, the same bits. 150 rows; K = 1040 ends 16 into its last stage.
TEST_F(CudaTiledMatmul, LessSharedMemoryGivesTheSameBits) {
  for (DType dtype : {DType::bf16, DType::f8_e4m3}) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t N = 300, M = 150, K = 1040;
    const std::vector<float> x = randn(M * K, 25);
    const Tensor xd = upload(x.data(), DType::f32, {M, K});
    const TestWeight w = make_weight(*this, dtype, N, K, 26);
    std::vector<float> first;
    for (const char* pre : {"0", "1"}) {
      for (const char* limit : {"", "101376", "92160", "60000"}) {
        SCOPED_TRACE(std::string("pre-split ") + pre + ", limit " + limit);
        ScopedEnv knob("HIBANA_CUDA_TILED_PRESPLIT", pre), small("HIBANA_CUDA_SMEM_LIMIT", limit);
        Tensor out = device_f32(M, N, std::nanf(""));
        gpu->matmul(xd, w.dev, out);
        const std::vector<float> got = download(out);
        if (first.empty()) {
          first = got;
          ASSERT_EQ(std::count_if(got.begin(), got.end(), [](float v) { return std::isnan(v); }),
                    0);
        }
        EXPECT_EQ(std::memcmp(got.data(), first.data(), M * N * sizeof(float)), 0);
      }
    }
  }
}

// Grouped experts: 300 tokens x 4 of 16 experts (about 75 rows an expert: the tiled kernel; the
// x row of an output row is its token for gate/up and the pair itself for down), and 80 tokens
// x 4 of 32 (about 10 rows an expert, as in a server's 512-token pass: the groups of 9 and more
// rows in one 64-token tile each, most of its n8 token tiles empty), bf16 and fp8: the pre-split
// and in-kernel activations, and each with the empty token tiles' products skipped
// (HIBANA_CUDA_TILED_SKIP, the default) and run, give the same bits. Before each way's pass, a
// pass over other activations leaves other values in the op's intermediate buffers (the
// stream-ordered pool hands them out again), so tiles a way does not write show.
TEST_F(CudaTiledMatmul, EveryWayOfTheTiledKernelGivesTheSameBitsForExperts) {
  const int64_t k = 4, H = 256, I = 128;
  for (const auto& [T, E] : {std::pair<int64_t, int64_t>{300, 16}, {80, 32}}) {
    std::vector<int32_t> ids(T * k);
    std::vector<float> weights(T * k);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < k; ++i) {
        ids[t * k + i] = static_cast<int32_t>((t * 5 + i * 3 + t / 7) % E);  // distinct per token
        weights[t * k + i] = 0.1f + 0.2f * static_cast<float>(i);
      }
    const std::vector<float> x = randn(T * H, 23), other = randn(T * H, 24);
    for (DType dtype : {DType::bf16, DType::f8_e4m3}) {
      SCOPED_TRACE(testing::Message() << T << " tokens, " << dtype_name(dtype));
      const ExpertSet set = make_experts(*this, E, H, I, 300, dtype);
      const ExpertWeights &host = set.host, &dev = set.dev;
      std::vector<float> ref(T * H);
      cpu->moe_experts(Tensor(const_cast<float*>(x.data()), DType::f32, {T, H}),
                       Tensor(ids.data(), DType::i32, {T, k}),
                       Tensor(weights.data(), DType::f32, {T, k}), host,
                       Tensor(ref.data(), DType::f32, {T, H}));
      const Tensor xd = upload(x.data(), DType::f32, {T, H});
      const Tensor other_d = upload(other.data(), DType::f32, {T, H});
      const Tensor idd = upload(ids.data(), DType::i32, {T, k});
      const Tensor wd = upload(weights.data(), DType::f32, {T, k});
      std::vector<float> first;
      for (const char* way : {"1 1", "0 1", "1 0", "0 0"}) {  // pre-split, skip
        ScopedEnv pre("HIBANA_CUDA_TILED_PRESPLIT", way[0] == '1' ? "1" : "0");
        ScopedEnv skip("HIBANA_CUDA_TILED_SKIP", way[2] == '1' ? "1" : "0");
        Tensor out = device_f32(T, H, std::nanf("")), junk = device_f32(T, H);
        gpu->moe_experts(other_d, idd, wd, dev, junk);
        gpu->moe_experts(xd, idd, wd, dev, out);
        const std::vector<float> got = download(out);
        EXPECT_LT(max_abs_diff(got, ref), 1e-4f) << "pre-split, skip: " << way;
        if (first.empty()) {
          first = got;
        } else {
          EXPECT_EQ(std::memcmp(got.data(), first.data(), T * H * sizeof(float)), 0)
              << "pre-split, skip: " << way << " changes the bits";
        }
      }
    }
  }
}

}  // namespace
}  // namespace hibana
