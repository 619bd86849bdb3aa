// The prefill rows of a pass (Backend::set_prefill_rows) by cuBLASLt: within bf16's rounding of
// the CPU's product; the other rows with the decode kernels' bits; a row's bits the same
// whatever the pass around it; and none of it outside a pass or with the switch off
// (HIBANA_CUDA_CUBLAS_PREFILL=0); the MoE experts' rows of prefill tokens with one or two bf16
// terms of the activations (HIBANA_CUDA_GROUPED_PREFILL, two by default). Skipped without a
// GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "support/cuda_fixture.h"
#include "support/cuda_weights.h"
#include "support/random.h"
#include "support/scoped_env.h"

namespace hibana {
namespace {

using test::make_weight;
using test::randn;
using test::ScopedEnv;
using test::TestWeight;

class CudaPrefillRows : public test::CudaFixture {
 protected:
  ScopedEnv on_{"HIBANA_CUDA_CUBLAS_PREFILL", "1"};
  // x · wᵀ of rows [b, e) of x on the GPU, with `rows` the pass's prefill rows (none: empty),
  // the pass being those rows alone.
  std::vector<float> product(const Tensor& x, const Weight& w, int64_t b, int64_t e,
                             std::vector<Backend::RowRange> rows) {
    Tensor out = device_f32(e - b, w.rows(), std::nanf(""));
    gpu->set_prefill_rows(e - b, std::move(rows));
    gpu->matmul(x.slice_rows(b, e), w, out);
    gpu->set_prefill_rows(0, {});
    return download(out);
  }
  static bool same_rows(const std::vector<float>& a, int64_t a0, const std::vector<float>& b,
                        int64_t b0, int64_t n, int64_t N) {
    return std::memcmp(a.data() + a0 * N, b.data() + b0 * N, n * N * sizeof(float)) == 0;
  }
};

constexpr int64_t N = 384, K = 512;

// A pass of 300 rows whose prefill rows are [64, 192) and [256, 300): those within the
// rounding of the CPU's f32 product (one bf16 term: 2^-7 of the sum of |x| |w| of the element,
// the rounding of x and of the weight, fp8's expanded with its scale; two or three terms
// (two leave ~2^-18 of each activation): 2^-15, a
// statistical bound, not a worst case — fp8 times its block scale in two bf16 planes leaves up
// to 2^-15 of each product and f32 sums of 512 products in another order as much again, but
// errors of random sign over 512 products add to ~2^-18 at most over the checked elements,
// where one plane's ~2^-9 a weight gave ~2^-13), and not all of the decode kernels' bits
// (cuBLASLt ran); the rows outside with exactly those bits.
TEST_F(CudaPrefillRows, PrefillRowsByCublasTheOthersKeepTheirBits) {
  const int64_t T = 300;
  const std::vector<float> x = randn(T * K, 21);
  for (DType dtype : {DType::bf16, DType::f8_e4m3}) {
    TestWeight w = make_weight(*this, dtype, N, K, 22);
    const Tensor xd = upload(x.data(), DType::f32, {T, K});
    const std::vector<float> exact = product(xd, w.dev, 0, T, {});
    // The CPU's f32 product, and I · wᵀ: the weight as the CPU reads it (fp8 times its
    // scales), [K, N], for the bound.
    std::vector<float> ref(T * N), eye(K * K, 0.0f), wT(K * N);
    cpu->matmul(Tensor(const_cast<float*>(x.data()), DType::f32, {T, K}), w.host,
                Tensor(ref.data(), DType::f32, {T, N}));
    for (int64_t k = 0; k < K; ++k) eye[k * K + k] = 1.0f;
    cpu->matmul(Tensor(eye.data(), DType::f32, {K, K}), w.host,
                Tensor(wT.data(), DType::f32, {K, N}));
    for (const char* terms : {"1", "2", "3"}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + ", terms " + terms);
      ScopedEnv mode("HIBANA_CUDA_CUBLAS_PREFILL", terms);
      const std::vector<float> got = product(xd, w.dev, 0, T, {{64, 192}, {256, 300}});
      EXPECT_TRUE(same_rows(got, 0, exact, 0, 64, N)) << "rows [0, 64)";
      EXPECT_TRUE(same_rows(got, 192, exact, 192, 64, N)) << "rows [192, 256)";
      EXPECT_FALSE(same_rows(got, 64, exact, 64, 128, N)) << "rows [64, 192) took cuBLASLt";
      const double bound = terms[0] == '1' ? 1.0 / 128 : 1.0 / 32768;
      int64_t bad = 0;
      for (int64_t r : {64, 100, 191, 256, 299}) {
        for (int64_t n = 0; n < N; ++n) {
          double mag = 0.0;
          for (int64_t k = 0; k < K; ++k) mag += std::fabs(x[r * K + k] * wT[k * N + n]);
          if (std::fabs(got[r * N + n] - ref[r * N + n]) > mag * bound) ++bad;
        }
      }
      EXPECT_EQ(bad, 0) << "elements past the rounding of the f32 product";
    }
  }
}

// A row's bits do not depend on the pass: the same rows as prefill rows of a 1024-row pass, of
// a 64-row pass, of a 192-row pass starting at row 448, and of a pass in which rows before them
// are not prefill rows.
TEST_F(CudaPrefillRows, ARowsBitsDoNotDependOnItsPass) {
  const int64_t T = 1024;
  const std::vector<float> x = randn(T * K, 23);
  for (DType dtype : {DType::bf16, DType::f8_e4m3}) {
    SCOPED_TRACE(dtype_name(dtype));
    TestWeight w = make_weight(*this, dtype, N, K, 24);
    const Tensor xd = upload(x.data(), DType::f32, {T, K});
    for (const char* terms : {"1", "2", "3"}) {
      SCOPED_TRACE(std::string("terms ") + terms);
      ScopedEnv mode("HIBANA_CUDA_CUBLAS_PREFILL", terms);
      const std::vector<float> all = product(xd, w.dev, 0, T, {{0, T}});
      EXPECT_TRUE(same_rows(product(xd, w.dev, 0, 64, {{0, 64}}), 0, all, 0, 64, N));
      EXPECT_TRUE(same_rows(product(xd, w.dev, 448, 640, {{0, 192}}), 0, all, 448, 192, N));
      EXPECT_TRUE(same_rows(product(xd, w.dev, 937, 1024, {{23, 87}}), 23, all, 960, 64, N));
    }
  }
}

// Outside a pass's prefill rows (none set, a product of another row count than the pass's) and
// with HIBANA_CUDA_CUBLAS_PREFILL=0, every row has the decode kernels' bits.
TEST_F(CudaPrefillRows, OnlyThePassesRowsAndOnlyWithTheSwitchOn) {
  const int64_t T = 128;
  const std::vector<float> x = randn(T * K, 25);
  TestWeight w = make_weight(*this, DType::bf16, N, K, 26);
  const Tensor xd = upload(x.data(), DType::f32, {T, K});
  const std::vector<float> exact = product(xd, w.dev, 0, T, {});
  {
    ScopedEnv off("HIBANA_CUDA_CUBLAS_PREFILL", "0");
    EXPECT_TRUE(same_rows(product(xd, w.dev, 0, T, {{0, T}}), 0, exact, 0, T, N));
  }
  Tensor out = device_f32(64, N);
  gpu->set_prefill_rows(T, {{0, T}});
  gpu->matmul(xd.slice_rows(0, 64), w.dev, out);  // 64 rows of a 128-row pass: not the pass's
  gpu->set_prefill_rows(0, {});
  EXPECT_TRUE(same_rows(download(out), 0, exact, 0, 64, N));
}

// The MoE experts' rows of a pass's prefill tokens with HIBANA_CUDA_GROUPED_PREFILL=1 carry one
// bf16 term of the activations, with =2 two (the tiled kernel, mm::Params::prefill_mask): within 2%
// (one term) or 1e-4 (two) of the largest output of the three-term product, not its bits, two
// closer than one; the other tokens' outputs exactly the bits they have with three terms (=3) (or
// with fewer and no prefill rows); with the switch unset, two; and a prefill token's output the
// same in a pass of prefill tokens alone, whose experts' tiles hold no other rows (the tiles that
// skip the other terms' products), or whose experts' few rows the decode and small-batch kernels
// take, as in the full pass, whose tiles mix both; all of it the same bits with the activations
// split in the kernel and split beforehand into planes (whose short rows hold zeros for the terms
// they do not carry). bf16 and fp8 experts, 300 tokens x 2 of 8 experts.
TEST_F(CudaPrefillRows, MoeExpertsOfPrefillTokensCarryFewerTerms) {
  const int64_t E = 8, k = 2, H = 256, I = 128, T = 300;
  const std::vector<float> x = randn(T * H, 31);
  std::vector<int32_t> ids(T * k);
  std::vector<float> wts(T * k);
  for (int64_t t = 0; t < T; ++t) {
    ids[t * k] = static_cast<int32_t>(t % E);
    ids[t * k + 1] = static_cast<int32_t>((t % E + 1 + (t / E) % (E - 1)) % E);
    wts[t * k] = 0.625f;
    wts[t * k + 1] = 0.375f;
  }
  const Tensor xd = upload(x.data(), DType::f32, {T, H});
  const Tensor idd = upload(ids.data(), DType::i32, {T, k});
  const Tensor wd = upload(wts.data(), DType::f32, {T, k});
  for (DType dtype : {DType::bf16, DType::f8_e4m3}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<TestWeight> keep;
    ExpertWeights dev;
    for (int64_t e = 0; e < E; ++e) {
      keep.push_back(make_weight(*this, dtype, I, H, static_cast<uint32_t>(40 + 3 * e)));
      keep.push_back(make_weight(*this, dtype, I, H, static_cast<uint32_t>(41 + 3 * e)));
      keep.push_back(make_weight(*this, dtype, H, I, static_cast<uint32_t>(42 + 3 * e)));
      dev.gate.push_back(keep[keep.size() - 3].dev);
      dev.up.push_back(keep[keep.size() - 2].dev);
      dev.down.push_back(keep.back().dev);
    }
    // Tokens [b, e) through the experts, the pass's prefill rows `rows`.
    auto moe = [&](int64_t b, int64_t e, std::vector<Backend::RowRange> rows) {
      Tensor out = device_f32(e - b, H, std::nanf(""));
      gpu->set_prefill_rows(e - b, std::move(rows));
      gpu->moe_experts(xd.slice_rows(b, e), idd.slice_rows(b, e), wd.slice_rows(b, e), dev, out);
      gpu->set_prefill_rows(0, {});
      return download(out);
    };
    const std::vector<float> exact = moe(0, T, {});
    const std::vector<Backend::RowRange> blocks{{64, 192}, {256, 300}};
    {
      ScopedEnv off("HIBANA_CUDA_GROUPED_PREFILL", "3");
      EXPECT_TRUE(same_rows(moe(0, T, blocks), 0, exact, 0, T, H)) << "three terms";
    }
    std::vector<float> by_default;
    {
      ScopedEnv unset("HIBANA_CUDA_GROUPED_PREFILL", nullptr);
      by_default = moe(0, T, blocks);
    }
    float diffs[2] = {};
    for (const char* terms : {"1", "2"}) {
      SCOPED_TRACE(std::string("terms ") + terms);
      ScopedEnv on("HIBANA_CUDA_GROUPED_PREFILL", terms);
      EXPECT_TRUE(same_rows(moe(0, T, {}), 0, exact, 0, T, H)) << "no prefill rows";
      std::vector<float> got;
      for (const char* pre : {"0", "1"}) {  // the in-kernel split, then the planes
        ScopedEnv split("HIBANA_CUDA_TILED_PRESPLIT", pre);
        const std::vector<float> here = moe(0, T, blocks);
        if (got.empty()) got = here;
        EXPECT_TRUE(same_rows(here, 0, got, 0, T, H)) << "pre-split " << pre;
        EXPECT_TRUE(same_rows(moe(64, 192, {{0, 128}}), 0, here, 64, 128, H))
            << "prefill rows alone, pre-split " << pre;
      }
      EXPECT_TRUE(same_rows(got, 0, exact, 0, 64, H)) << "rows [0, 64)";
      EXPECT_TRUE(same_rows(got, 192, exact, 192, 64, H)) << "rows [192, 256)";
      float most = 0.0f, diff = 0.0f;
      for (const Backend::RowRange& r : blocks) {
        EXPECT_FALSE(same_rows(got, r.begin, exact, r.begin, r.end - r.begin, H)) << r.begin;
        for (int64_t i = r.begin * H; i < r.end * H; ++i) {
          most = std::max(most, std::fabs(exact[i]));
          diff = std::max(diff, std::fabs(got[i] - exact[i]));
        }
      }
      EXPECT_LT(diff, (terms[0] == '1' ? 0.02f : 1e-4f) * most);
      diffs[terms[0] - '1'] = diff;
      if (terms[0] == '2') {
        EXPECT_TRUE(same_rows(by_default, 0, got, 0, T, H)) << "not the default";
      }
    }
    EXPECT_LT(diffs[1], diffs[0]) << "two terms are not closer than one";
  }
}

}  // namespace
}  // namespace hibana
