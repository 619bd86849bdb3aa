// CPU kernels against straightforward reference loops, and the invariances the engine relies on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>

#include "backend/backend.h"
#include "core/numeric.h"
#include "support/cuda_fixture.h"
#include "support/moe_blocks.h"
#include "support/random.h"

namespace hibana {
namespace {

using test::randn;

// Both compiled variants of the CPU backend.
std::vector<std::unique_ptr<Backend>> backends() {
  std::vector<std::unique_ptr<Backend>> out;
  setenv("HIBANA_CPU", "portable", 1);
  out.push_back(make_cpu_backend());
  unsetenv("HIBANA_CPU");
  auto native = make_cpu_backend();
  if (native->name() != out[0]->name()) out.push_back(std::move(native));
  return out;
}

// The GPU tests' comparison helper: a NaN on one side only is the largest difference there is
// (it used to vanish into std::max), NaN on both sides agrees.
TEST(TestSupport, MaxAbsDiffCountsANanOnOneSide) {
  using test::CudaFixture;
  const float nan = std::nanf("");
  EXPECT_EQ(CudaFixture::max_abs_diff({1.0f, nan, 3.0f}, {1.0f, 2.0f, 3.0f}), INFINITY);
  EXPECT_EQ(CudaFixture::max_abs_diff({1.0f, 2.0f}, {1.0f, nan}), INFINITY);
  EXPECT_EQ(CudaFixture::max_abs_diff({1.0f, nan, 3.0f}, {1.5f, nan, 3.0f}), 0.5f);
}

TEST(CpuOps, MatmulAllDtypesMatchReference) {
  const int64_t M = 7, K = 45, N = 37;
  auto x = randn(M * K, 1), w = randn(N * K, 2, 0.2f);
  std::vector<uint16_t> wb(N * K), wh(N * K);
  std::vector<uint8_t> w8(N * K);
  const int64_t br = 16, bc = 16, sr = (N + br - 1) / br, sc = (K + bc - 1) / bc;
  std::vector<float> scale(sr * sc, 0.01f);
  for (int64_t i = 0; i < sr * sc; ++i) scale[i] = 0.005f * (1 + i % 3);
  for (int64_t i = 0; i < N * K; ++i) {
    wb[i] = f32_to_bf16(w[i]);
    wh[i] = f32_to_f16(w[i]);
    w8[i] = f32_to_f8e4m3(w[i] / scale[(i / K / br) * sc + (i % K) / bc]);
  }
  auto decoded = [&](DType t, int64_t n, int64_t k) -> float {
    int64_t i = n * K + k;
    switch (t) {
      case DType::bf16:
        return bf16_to_f32(wb[i]);
      case DType::f16:
        return f16_to_f32(wh[i]);
      case DType::f8_e4m3:
        return f8e4m3_to_f32(w8[i]) * scale[(n / br) * sc + k / bc];
      default:
        return w[i];
    }
  };
  for (auto& be : backends()) {
    for (DType t : {DType::f32, DType::bf16, DType::f16, DType::f8_e4m3}) {
      Weight wt;
      void* p = t == DType::f32    ? static_cast<void*>(w.data())
                : t == DType::bf16 ? static_cast<void*>(wb.data())
                : t == DType::f16  ? static_cast<void*>(wh.data())
                                   : static_cast<void*>(w8.data());
      wt.w = Tensor(p, t, {N, K});
      if (t == DType::f8_e4m3) {
        wt.scale = Tensor(scale.data(), DType::f32, {sr, sc});
        wt.block_rows = br;
        wt.block_cols = bc;
      }
      std::vector<float> out(M * N);
      be->matmul(Tensor(x.data(), DType::f32, {M, K}), wt, Tensor(out.data(), DType::f32, {M, N}));
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
          double ref = 0;
          for (int64_t k = 0; k < K; ++k) ref += double(x[m * K + k]) * decoded(t, n, k);
          ASSERT_NEAR(out[m * N + n], ref, 1e-4) << be->name() << " " << dtype_name(t);
        }
      }
    }
  }
}

TEST(CpuOps, MatmulRowsDoNotDependOnTheBatch) {
  // Small batches take a different kernel for bf16 weights (rows read in place); every batch
  // size must still give the same bits per row.
  const int64_t K = 203, N = 70;
  auto x = randn(9 * K, 3), w = randn(N * K, 4);
  std::vector<uint16_t> wb(N * K);
  for (int64_t i = 0; i < N * K; ++i) wb[i] = f32_to_bf16(w[i]);
  for (auto& be : backends()) {
    for (DType t : {DType::f32, DType::bf16}) {
      Weight wt;
      wt.w = Tensor(t == DType::f32 ? static_cast<void*>(w.data()) : wb.data(), t, {N, K});
      std::vector<float> all(9 * N);
      be->matmul(Tensor(x.data(), DType::f32, {9, K}), wt, Tensor(all.data(), DType::f32, {9, N}));
      for (int64_t rows : {1, 2, 3, 4}) {
        for (int64_t r = 0; r + rows <= 9; r += rows) {
          std::vector<float> part(rows * N);
          be->matmul(Tensor(x.data() + r * K, DType::f32, {rows, K}), wt,
                     Tensor(part.data(), DType::f32, {rows, N}));
          EXPECT_EQ(std::memcmp(part.data(), all.data() + r * N, rows * N * sizeof(float)), 0)
              << be->name() << " " << dtype_name(t) << " rows " << r << ".." << r + rows;
        }
      }
    }
  }
}

// Runs the DeltaNet recurrence over T tokens of one sequence in the given mode.
std::vector<float> run_gdn(Backend& be, GdnMode mode, int64_t T, int64_t start) {
  const int64_t nk = 2, nv = 4, dk = 16, dv = 24, C = 2 * nk * dk + nv * dv;
  auto qkv = randn(T * C, 5), b = randn(T * nv, 6), a = randn(T * nv, 7);
  std::vector<float> A_log = {0.1f, 0.7f, 1.2f, -0.5f}, dt = {0.3f, -0.2f, 0.1f, 0.0f};
  std::vector<float> states(2 * nv * dk * dv, 0.0f), out(T * nv * dv);
  std::vector<int32_t> pos(T), seq(T, 0), start_idx = {0, static_cast<int32_t>(T)}, slot = {1},
                                          snaps(T, -1);
  std::iota(pos.begin(), pos.end(), static_cast<int32_t>(start));
  BatchLayout l;
  l.num_tokens = T;
  l.num_seqs = 1;
  l.positions = Tensor(pos.data(), DType::i32, {T});
  l.token_seq = Tensor(seq.data(), DType::i32, {T});
  l.seq_start = Tensor(start_idx.data(), DType::i32, {2});
  l.state_slot = Tensor(slot.data(), DType::i32, {1});
  l.snapshot_slot = Tensor(snaps.data(), DType::i32, {T});
  l.gdn_mode = mode;
  be.gdn_recurrence(Tensor(qkv.data(), DType::f32, {T, C}), Tensor(b.data(), DType::f32, {T, nv}),
                    Tensor(a.data(), DType::f32, {T, nv}), Tensor(A_log.data(), DType::f32, {nv}),
                    Tensor(dt.data(), DType::f32, {nv}), {nk, nv, dk, dv},
                    Tensor(states.data(), DType::f32, {2, nv, dk, dv}), l,
                    Tensor(out.data(), DType::f32, {T, nv * dv}));
  out.insert(out.end(), states.begin() + nv * dk * dv, states.end());  // final state too
  return out;
}

TEST(CpuOps, ChunkedDeltaRuleMatchesRecurrent) {
  for (auto& be : backends()) {
    for (int64_t start : {0, 64}) {
      auto rec = run_gdn(*be, GdnMode::recurrent, 150, start);
      auto chk = run_gdn(*be, GdnMode::aligned_chunks, 150, start);
      double worst = 0;
      for (size_t i = 0; i < rec.size(); ++i)
        worst = std::max(worst, double(std::fabs(rec[i] - chk[i])));
      EXPECT_LT(worst, 2e-5) << be->name();
      EXPECT_GT(worst, 0.0) << "the chunked form did not run";
    }
  }
}

TEST(CpuOps, RopeRotatesOnlyTheLeadingDims) {
  auto be = make_cpu_backend();
  const int64_t heads = 2, hd = 8, rot = 4;
  std::vector<float> x = randn(3 * heads * hd, 9), orig = x;
  std::vector<int32_t> pos = {0, 5, 1000};
  BatchLayout l;
  l.num_tokens = 3;
  l.positions = Tensor(pos.data(), DType::i32, {3});
  be->rope(Tensor(x.data(), DType::f32, {3, heads * hd}), heads, hd, rot, 10000.0, l);
  for (int64_t t = 0; t < 3; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* o = orig.data() + (t * heads + h) * hd;
      const float* y = x.data() + (t * heads + h) * hd;
      for (int64_t i = 0; i < rot / 2; ++i) {
        double f = pos[t] / std::pow(10000.0, 2.0 * i / rot);
        EXPECT_NEAR(y[i], o[i] * std::cos(f) - o[i + rot / 2] * std::sin(f), 2e-4);
        EXPECT_NEAR(y[i + rot / 2], o[i + rot / 2] * std::cos(f) + o[i] * std::sin(f), 2e-4);
      }
      for (int64_t i = rot; i < hd; ++i) EXPECT_EQ(y[i], o[i]);
    }
  }
}

TEST(CpuOps, MoeRoutingTopKAndRenormalisation) {
  auto be = make_cpu_backend();
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.5f, 2.0f};
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  be->moe_route(Tensor(logits.data(), DType::f32, {1, 5}), 2, true, Tensor{},
                Tensor(ids.data(), DType::i32, {1, 2}), Tensor(w.data(), DType::f32, {1, 2}));
  EXPECT_EQ(ids[0], 1);  // tie with expert 4 goes to the lower index
  EXPECT_EQ(ids[1], 4);
  EXPECT_FLOAT_EQ(w[0] + w[1], 1.0f);
  be->moe_route(Tensor(logits.data(), DType::f32, {1, 5}), 2, false, Tensor{},
                Tensor(ids.data(), DType::i32, {1, 2}), Tensor(w.data(), DType::f32, {1, 2}));
  double z = 0;
  for (float l : logits) z += std::exp(l);
  EXPECT_NEAR(w[0], std::exp(2.0) / z, 1e-6);
}

// A shared expert's gate logit becomes pair k: id E, weight sigmoid(logit), outside the
// renormalisation of the routed pairs.
TEST(CpuOps, MoeRoutingAppendsTheSharedExpert) {
  auto be = make_cpu_backend();
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.5f, 2.0f, 0.3f, 0.2f, 3.0f, 0.0f, -2.0f};
  std::vector<float> gate = {0.5f, -1.25f};
  std::vector<int32_t> ids(6);
  std::vector<float> w(6);
  be->moe_route(Tensor(logits.data(), DType::f32, {2, 5}), 2, true,
                Tensor(gate.data(), DType::f32, {2, 1}), Tensor(ids.data(), DType::i32, {2, 3}),
                Tensor(w.data(), DType::f32, {2, 3}));
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 4, 5, 2, 0, 5}));
  EXPECT_FLOAT_EQ(w[0] + w[1], 1.0f);
  EXPECT_FLOAT_EQ(w[3] + w[4], 1.0f);
  EXPECT_NEAR(w[2], 1.0 / (1.0 + std::exp(-0.5)), 1e-6);
  EXPECT_NEAR(w[5], 1.0 / (1.0 + std::exp(1.25)), 1e-6);
  // k columns where k + 1 are needed: an error, not a write past the row.
  EXPECT_THROW(
      be->moe_route(Tensor(logits.data(), DType::f32, {2, 5}), 2, true,
                    Tensor(gate.data(), DType::f32, {2, 1}), Tensor(ids.data(), DType::i32, {2, 2}),
                    Tensor(w.data(), DType::f32, {2, 2})),
      Error);
}

// Expert parallelism: each of two ranks keeps its block of experts (ids of the others become -1
// with weight 0, which moe_experts skips); the ranks' outputs add up to the whole op's.
TEST(CpuOps, MoeExpertsSplitIntoBlocksAddUpToTheWhole) {
  const int64_t H = 16, I = 8, E = 4;
  std::vector<std::vector<float>> mats;  // keeps the expert matrices alive
  ExpertWeights all;
  auto matrix = [&](int64_t rows, int64_t cols) {
    mats.push_back(
        randn(static_cast<size_t>(rows * cols), static_cast<uint32_t>(mats.size() + 1), 0.3f));
    Weight wt;
    wt.w = Tensor(mats.back().data(), DType::f32, {rows, cols});
    return wt;
  };
  mats.reserve(3 * E);
  for (int64_t e = 0; e < E; ++e) {
    all.gate.push_back(matrix(I, H));
    all.up.push_back(matrix(I, H));
    all.down.push_back(matrix(H, I));
  }
  for (auto& be : backends()) {
    SCOPED_TRACE(be->name());
    test::expect_expert_blocks_add_up(*be, all, H);
  }
}

}  // namespace
}  // namespace hibana

namespace hibana {
namespace {

// The AVX2 variant must really run its FMA intrinsics: its dot products round differently from
// the portable build's multiply-then-add. (A target pragma that silently did nothing once made
// both variants compile to the same portable code.)
TEST(CpuOps, Avx2VariantRunsItsOwnKernels) {
  auto all = backends();
  if (all.size() < 2) GTEST_SKIP() << "this CPU has no AVX2/FMA/F16C";
  ASSERT_EQ(all[1]->name(), "cpu-avx2");
  const int64_t M = 8, K = 513, N = 64;
  auto x = randn(M * K, 11), w = randn(N * K, 12);
  Weight wt;
  wt.w = Tensor(w.data(), DType::f32, {N, K});
  std::vector<float> a(M * N), b(M * N);
  all[0]->matmul(Tensor(x.data(), DType::f32, {M, K}), wt, Tensor(a.data(), DType::f32, {M, N}));
  all[1]->matmul(Tensor(x.data(), DType::f32, {M, K}), wt, Tensor(b.data(), DType::f32, {M, N}));
  int differ = 0;
  for (int64_t i = 0; i < M * N; ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-3);
    differ += a[i] != b[i];
  }
  EXPECT_GT(differ, 0) << "the AVX2 variant produced exactly the portable results";
}

}  // namespace
}  // namespace hibana
