// CUDA kernels against the CPU backend at shapes the tiny fixture models do not reach (split-K
// matmuls, grouped MoE with many tokens), and the promise that a row's result is bit-identical
// whatever else is in the batch (attention: cuda_attention_test.cpp). Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>

#include "backend/backend.h"
#include "core/device_memory.h"
#include "core/numeric.h"
#include "support/cuda_fixture.h"
#include "support/cuda_weights.h"
#include "support/moe_blocks.h"
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

class CudaOps : public test::CudaFixture {
 public:
  void check_batches_and_views(int64_t N, int64_t K);

  // The CPU's routing of `logits` and its experts' output for x, the reference; and the GPU's
  // routing of the same logits, which must pick the same experts with the same weights (its
  // id buffer starts as zeros, so a router that writes nothing fails).
  struct Routed {
    Tensor ids, weights;            // the GPU's, on the device
    std::vector<float> ref;         // the CPU's moe_experts output
    std::vector<int32_t> host_ids;  // the CPU's routing
    std::vector<float> host_weights;
  };
  Routed route_both(std::vector<float> x, std::vector<float> logits, int64_t T, int64_t E,
                    int64_t k, int64_t H, const ExpertWeights& host) {
    std::vector<int32_t> ids(T * k);
    std::vector<float> weights(T * k), ref(T * H);
    cpu->moe_route(Tensor(logits.data(), DType::f32, {T, E}), k, true, Tensor{},
                   Tensor(ids.data(), DType::i32, {T, k}),
                   Tensor(weights.data(), DType::f32, {T, k}));
    cpu->moe_experts(Tensor(x.data(), DType::f32, {T, H}), Tensor(ids.data(), DType::i32, {T, k}),
                     Tensor(weights.data(), DType::f32, {T, k}), host,
                     Tensor(ref.data(), DType::f32, {T, H}));
    const std::vector<int32_t> zero_ids(T * k, 0);
    Tensor idd = upload(zero_ids.data(), DType::i32, {T, k});
    Tensor wd = device_f32(T, k);
    gpu->moe_route(upload(logits.data(), DType::f32, {T, E}), k, true, Tensor{}, idd, wd);
    std::vector<int32_t> gids(T * k);
    copy_to_host(idd, gids.data());
    EXPECT_EQ(gids, ids);
    EXPECT_LT(max_abs_diff(download(wd), weights), 1e-6f);
    return {idd, wd, std::move(ref), std::move(ids), std::move(weights)};
  }
};

TEST_F(CudaOps, MatmulMatchesCpuAndEveryBatchSizeGivesTheSameBits) {
  // K gives several splits (600 x 3072: 6; 200 x 8192: 16 and 200 x 5120: 10, more than the
  // split reduction loads at once, the second round full or not); M > 64 runs them serially in
  // the tensor-core kernel, M > 32 in the SIMT one.
  for (auto [N, K] : {std::pair<int64_t, int64_t>{600, 3072}, {200, 8192}, {200, 5120}}) {
    SCOPED_TRACE(testing::Message() << N << " x " << K);
    check_batches_and_views(N, K);
  }
}

void CudaOps::check_batches_and_views(int64_t N, int64_t K) {
  const int64_t M = 300;
  auto x = randn(M * K, 7);
  for (DType dtype : {DType::f32, DType::bf16, DType::f8_e4m3}) {
    SCOPED_TRACE(dtype_name(dtype));
    TestWeight w = make_weight(*this, dtype, N, K, 11);
    std::vector<float> ref(M * N);
    cpu->matmul(Tensor(x.data(), DType::f32, {M, K}), w.host,
                Tensor(ref.data(), DType::f32, {M, N}));
    Tensor xd = upload(x.data(), DType::f32, {M, K});
    Tensor full = device_f32(M, N);
    gpu->matmul(xd, w.dev, full);
    std::vector<float> all = download(full);
    EXPECT_LT(max_abs_diff(all, ref), 1e-4f);
    for (int64_t m : {1, 3, 8, 20, 33, 70}) {
      Tensor part = device_f32(m, N);
      gpu->matmul(xd.slice_rows(0, m), w.dev, part);
      std::vector<float> got = download(part);
      EXPECT_EQ(std::memcmp(got.data(), all.data(), m * N * sizeof(float)), 0)
          << "the first " << m << " rows differ from the same rows in a batch of " << M;
    }
    // The same activations as a view whose rows are not 16-byte aligned (other load paths; the
    // tensor-core kernel then runs every split of these 300 rows in one CTA): the same bits.
    std::vector<float> wide(M * (K + 1), 0.0f);
    for (int64_t r = 0; r < M; ++r)
      std::copy(x.begin() + r * K, x.begin() + (r + 1) * K, wide.begin() + r * (K + 1) + 1);
    Tensor view = upload(wide.data(), DType::f32, {M, K + 1});
    view.data = static_cast<float*>(view.data) + 1;
    view.shape[1] = K;
    Tensor unaligned = device_f32(M, N);
    gpu->matmul(view, w.dev, unaligned);
    EXPECT_EQ(std::memcmp(download(unaligned).data(), all.data(), M * N * sizeof(float)), 0)
        << "unaligned activation rows";
  }
}

// 140-byte bf16 rows take the unvectorised (SIMT) path; fp8 rows of 200 end inside a stage,
// past which no scale may be read (compute-sanitizer checks that). bf16 rows of 72 and fp8 rows
// of 208 take the tensor-core paths and end inside their 32- / 64-element chunk; a batch of 130
// runs the tiled kernel (two full token tiles and a partial one), a single row the small one.
TEST_F(CudaOps, MatmulUnalignedShapesMatchCpu) {
  for (auto [dtype, K] : {std::pair{DType::bf16, int64_t{70}},
                          {DType::f8_e4m3, int64_t{200}},
                          {DType::bf16, int64_t{72}},
                          {DType::f8_e4m3, int64_t{208}}}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)) + " K=" + std::to_string(K));
    const int64_t N = 37, M = 130;
    auto x = randn(M * K, 3);
    TestWeight w = make_weight(*this, dtype, N, K, 4);
    std::vector<float> ref(M * N);
    cpu->matmul(Tensor(x.data(), DType::f32, {M, K}), w.host,
                Tensor(ref.data(), DType::f32, {M, N}));
    Tensor xd = upload(x.data(), DType::f32, {M, K});
    Tensor out = device_f32(M, N);
    gpu->matmul(xd, w.dev, out);
    std::vector<float> all = download(out);
    EXPECT_LT(max_abs_diff(all, ref), 1e-5f);
    Tensor one = device_f32(1, N);
    gpu->matmul(xd.slice_rows(M - 1, M), w.dev, one);
    std::vector<float> alone = download(one);
    EXPECT_EQ(std::memcmp(alone.data(), all.data() + (M - 1) * N, N * sizeof(float)), 0);
    // The same rows inside a wider buffer whose columns past K are NaN (as a graph's reused
    // memory may hold): nothing past K is read, so the bits are the same, alone and together.
    Tensor fenced_x = upload_fenced(x, M, K);
    Tensor fenced = device_f32(M, N);
    gpu->matmul(fenced_x, w.dev, fenced);
    EXPECT_EQ(std::memcmp(download(fenced).data(), all.data(), M * N * sizeof(float)), 0)
        << "columns past K were read";
    gpu->matmul(fenced_x.slice_rows(M - 1, M), w.dev, one);
    EXPECT_EQ(std::memcmp(download(one).data(), all.data() + (M - 1) * N, N * sizeof(float)), 0)
        << "columns past K were read (one row)";
  }
}

TEST_F(CudaOps, MoeMatchesCpuAndTokensDoNotDependOnTheirNeighbours) {
  // 300 tokens x 4 of 16 experts: most experts get more than 64 rows (the tiled kernel).
  const int64_t E = 16, k = 4, H = 256, I = 128, T = 300;
  ExpertWeights host, dev;
  std::vector<TestWeight> keep_w;
  for (int64_t e = 0; e < E; ++e) {
    keep_w.push_back(make_weight(*this, DType::bf16, I, H, 100 + e));
    keep_w.push_back(make_weight(*this, DType::bf16, I, H, 200 + e));
    keep_w.push_back(make_weight(*this, DType::bf16, H, I, 300 + e));
  }
  // Expert e of a set takes the matrices of expert source(e).
  auto build_set = [&](auto source, ExpertWeights& h, ExpertWeights& d) {
    for (int64_t e = 0; e < E; ++e) {
      const int64_t s = source(e);
      h.gate.push_back(keep_w[3 * s].host);
      h.up.push_back(keep_w[3 * s + 1].host);
      h.down.push_back(keep_w[3 * s + 2].host);
      d.gate.push_back(keep_w[3 * s].dev);
      d.up.push_back(keep_w[3 * s + 1].dev);
      d.down.push_back(keep_w[3 * s + 2].dev);
    }
  };
  build_set([](int64_t e) { return e; }, host, dev);
  auto x = randn(T * H, 5), logits = randn(T * E, 6);
  auto [idd, wd, ref, ids, weights] = route_both(x, logits, T, E, k, H, host);

  Tensor xd = upload(x.data(), DType::f32, {T, H});
  Tensor out = device_f32(T, H);
  gpu->moe_experts(xd, idd, wd, dev, out);
  std::vector<float> all = download(out);
  EXPECT_LT(max_abs_diff(all, ref), 1e-5f);
  // 12 and 40 tokens: groups of up to 8 rows take the decode kernel, larger ones the
  // small-batch one, in two launches.
  for (int64_t m : {1, 3, 12, 40}) {
    Tensor part = device_f32(m, H);
    gpu->moe_experts(xd.slice_rows(0, m), idd.slice_rows(0, m), wd.slice_rows(0, m), dev, part);
    std::vector<float> got = download(part);
    EXPECT_EQ(std::memcmp(got.data(), all.data(), m * H * sizeof(float)), 0) << m << " tokens";
  }

  // A second expert set with the same first and last matrices but two experts in between
  // swapped (as a reloaded model's can be) gets its own outputs, not the first set's.
  ExpertWeights host2, dev2;
  build_set([](int64_t e) { return e == 1 ? int64_t{2} : e == 2 ? int64_t{1} : e; }, host2, dev2);
  std::vector<float> ref2(T * H);
  cpu->moe_experts(Tensor(x.data(), DType::f32, {T, H}), Tensor(ids.data(), DType::i32, {T, k}),
                   Tensor(weights.data(), DType::f32, {T, k}), host2,
                   Tensor(ref2.data(), DType::f32, {T, H}));
  ASSERT_GT(max_abs_diff(ref2, ref), 1e-3f);
  Tensor out2 = device_f32(T, H);
  gpu->moe_experts(xd, idd, wd, dev2, out2);
  EXPECT_LT(max_abs_diff(download(out2), ref2), 1e-5f);
}

// More (token, expert) pairs than the grouping kernel's threads keep in registers (4 each of
// 1024): 1100 tokens x 4 experts, every pair grouped and computed as on the CPU.
TEST_F(CudaOps, MoeGroupsMorePairsThanItsThreadsHold) {
  const int64_t E = 16, k = 4, H = 64, I = 32, T = 1100;
  const ExpertSet set = make_experts(*this, E, H, I, 2000);
  const ExpertWeights &host = set.host, &dev = set.dev;
  auto x = randn(T * H, 9), logits = randn(T * E, 10);
  auto [idd, wd, ref, ids, weights] = route_both(x, logits, T, E, k, H, host);
  Tensor out = device_f32(T, H);
  gpu->moe_experts(upload(x.data(), DType::f32, {T, H}), idd, wd, dev, out);
  EXPECT_LT(max_abs_diff(download(out), ref), 1e-5f);
}

// The shared expert's pair appended by the router (id E, weight sigmoid(gate)) on the GPU as on
// the CPU, for expert counts of each routing kernel (registers, memory).
TEST_F(CudaOps, MoeRouteAppendsTheSharedExpertLikeTheCpu) {
  for (const int64_t E : {int64_t{64}, int64_t{600}}) {
    SCOPED_TRACE(E);
    const int64_t T = 7, k = 4;
    auto logits = randn(T * E, 21), gate = randn(T, 22);
    std::vector<int32_t> ids(T * (k + 1)), gids(T * (k + 1));
    std::vector<float> weights(T * (k + 1));
    cpu->moe_route(
        Tensor(logits.data(), DType::f32, {T, E}), k, true, Tensor(gate.data(), DType::f32, {T, 1}),
        Tensor(ids.data(), DType::i32, {T, k + 1}), Tensor(weights.data(), DType::f32, {T, k + 1}));
    const std::vector<int32_t> zero_ids(T * (k + 1), 0);
    Tensor idd = upload(zero_ids.data(), DType::i32, {T, k + 1});
    Tensor wd = device_f32(T, k + 1);
    gpu->moe_route(upload(logits.data(), DType::f32, {T, E}), k, true,
                   upload(gate.data(), DType::f32, {T, 1}), idd, wd);
    copy_to_host(idd, gids.data());
    EXPECT_EQ(gids, ids);
    EXPECT_LT(max_abs_diff(download(wd), weights), 1e-6f);
    for (int64_t t = 0; t < T; ++t) EXPECT_EQ(gids[t * (k + 1) + k], E);
  }
}

// Routing where probabilities tie: ties go to the lower expert on the GPU as on the CPU, across
// the slots a lane holds (experts 32 apart) and across lanes, with more picks than a warp has
// lanes (k = 40), for each routing kernel (E 64, 200, 512 in registers, 600 in memory), with
// and without renormalisation. Row 0: every logit equal; row 1: experts 5, 20 and 37 share the
// largest logit, 6 and 38 the next; row 2: random.
TEST_F(CudaOps, MoeRouteBreaksTiesTowardsTheLowerExpertLikeTheCpu) {
  for (const int64_t E : {int64_t{64}, int64_t{200}, int64_t{512}, int64_t{600}}) {
    for (const bool renormalise : {true, false}) {
      SCOPED_TRACE(testing::Message() << E << (renormalise ? " renormalised" : ""));
      const int64_t T = 3, k = 40;
      std::vector<float> logits(T * E, 0.5f);
      const std::vector<float> noise = randn(2 * E, 23);
      for (int64_t e = 0; e < E; ++e) {
        logits[E + e] = -1.0f - std::fabs(noise[e]);
        logits[2 * E + e] = noise[E + e];
      }
      for (int64_t e : {37, 5, 20}) logits[E + e] = 3.0f;
      for (int64_t e : {6, 38}) logits[E + e] = 2.0f;
      std::vector<int32_t> ids(T * k), gids(T * k);
      std::vector<float> weights(T * k);
      cpu->moe_route(Tensor(logits.data(), DType::f32, {T, E}), k, renormalise, Tensor{},
                     Tensor(ids.data(), DType::i32, {T, k}),
                     Tensor(weights.data(), DType::f32, {T, k}));
      const std::vector<int32_t> zero_ids(T * k, 0);
      Tensor idd = upload(zero_ids.data(), DType::i32, {T, k});
      Tensor wd = device_f32(T, k);
      gpu->moe_route(upload(logits.data(), DType::f32, {T, E}), k, renormalise, Tensor{}, idd, wd);
      copy_to_host(idd, gids.data());
      EXPECT_EQ(gids, ids);
      EXPECT_LT(max_abs_diff(download(wd), weights), 1e-6f);
      for (int64_t j = 0; j < k; ++j) EXPECT_EQ(gids[j], j) << "equal logits pick 0 .. k-1";
      EXPECT_EQ(std::vector<int32_t>(gids.begin() + k, gids.begin() + k + 5),
                (std::vector<int32_t>{5, 20, 37, 6, 38}));
    }
  }
}

// Routing and grouping with more experts than the kernels keep per thread (E > 512: the router
// keeps its probabilities in memory, each grouping thread owns two experts), and each expert's
// [gate ; up] read as one stacked matrix: the same bits as gate and up apart, and the CPU's
// results.
TEST_F(CudaOps, MoeWithManyExpertsAndStackedGateUpMatchesCpu) {
  for (const int64_t E : {int64_t{512}, int64_t{1100}}) {
    SCOPED_TRACE(E);
    const int64_t k = 8, H = 128, I = 64, T = 40;
    const ExpertSet set = make_experts(*this, E, H, I, 1000);
    const ExpertWeights &host = set.host, &dev = set.dev;
    ExpertWeights stacked;
    for (int64_t e = 0; e < E; ++e) {
      const TestWeight &g = set.keep[3 * e], &u = set.keep[3 * e + 1], &d = set.keep[3 * e + 2];
      std::vector<uint8_t> both(g.bytes);
      both.insert(both.end(), u.bytes.begin(), u.bytes.end());
      Weight gu;
      gu.w = upload(both.data(), DType::bf16, {2 * I, H});
      Weight gs = gu, us = gu;  // views of the stacked rows
      gs.w.shape[0] = us.w.shape[0] = I;
      us.w.data = static_cast<char*>(gu.w.data) + g.bytes.size();
      stacked.gate.push_back(gs);
      stacked.up.push_back(us);
      stacked.down.push_back(d.dev);
      stacked.gate_up.push_back(gu);
    }
    auto x = randn(T * H, 7), logits = randn(T * E, 8);
    auto [idd, wd, ref, ids, weights] = route_both(x, logits, T, E, k, H, host);
    Tensor xd = upload(x.data(), DType::f32, {T, H});
    Tensor apart = device_f32(T, H), together = device_f32(T, H);
    gpu->moe_experts(xd, idd, wd, dev, apart);
    gpu->moe_experts(xd, idd, wd, stacked, together);
    const std::vector<float> a = download(apart), b = download(together);
    EXPECT_LT(max_abs_diff(a, ref), 1e-5f);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  }
}

// The residual add fused into the norm: x and the normalised rows have the bits of add then
// rmsnorm, for hidden rows held in registers (2048), rows past them (7000) and narrow rows
// (256: the two kernels).
TEST_F(CudaOps, AddRmsnormHasTheBitsOfAddThenRmsnorm) {
  for (const int64_t H : {int64_t{2048}, int64_t{7000}, int64_t{256}}) {
    for (const bool zc : {false, true}) {
      SCOPED_TRACE(testing::Message() << H << (zc ? " zero-centred" : ""));
      const int64_t T = 5;
      auto x = randn(T * H, 11), y = randn(T * H, 12), w = randn(H, 13);
      Tensor wd = upload(w.data(), DType::f32, {H});
      Tensor yd = upload(y.data(), DType::f32, {T, H});
      Tensor x1 = upload(x.data(), DType::f32, {T, H}), x2 = upload(x.data(), DType::f32, {T, H});
      Tensor n1 = device_f32(T, H), n2 = device_f32(T, H);
      gpu->add(x1, yd);
      gpu->rmsnorm(x1, wd, 1e-6f, zc, n1);
      gpu->add_rmsnorm(x2, yd, wd, 1e-6f, zc, n2);
      for (auto [p, q] : {std::pair{x1, x2}, std::pair{n1, n2}}) {
        const std::vector<float> a = download(p), b = download(q);
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
      }
      std::vector<float> ref_x(x), ref_n(T * H);
      Tensor rx(ref_x.data(), DType::f32, {T, H});
      cpu->add_rmsnorm(rx, Tensor(y.data(), DType::f32, {T, H}), Tensor(w.data(), DType::f32, {H}),
                       1e-6f, zc, Tensor(ref_n.data(), DType::f32, {T, H}));
      EXPECT_LT(max_abs_diff(download(n2), ref_n), 1e-4f);
    }
  }
}

// The SwiGLU half of an MLP from one decode-kernel launch (HIBANA_CUDA_FUSED_SWIGLU=1) has the
// bits of the matmul then silu_mul: 1 and 2 rows (packed), 3 and 8, bf16 and fp8, a [2048,
// 1024] gate/up in 2 splits (the partials carry gate and up apart), a [3072, 512] in one, and
// a [2000, 1024] whose last CTA has 8 of its 32 outputs (the others past I = 1000).
// A backend with its op timer on shows silu_mul gone; 9 rows take the two ops, and its report
// then names no matmul_swiglu (it once did: the entry was opened before the kernel declined).
TEST_F(CudaOps, SwigluMatmulHasTheBitsOfMatmulThenSiluMul) {
  ScopedEnv timing("HIBANA_CUDA_TIMING", "1");
  const std::unique_ptr<Backend> timed = make_cuda_backend();  // (its timer reads it now)
  for (auto [I, H] : {std::pair<int64_t, int64_t>{1024, 1024}, {1536, 512}, {1000, 1024}}) {
    for (DType dtype : {DType::bf16, DType::f8_e4m3}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << 2 * I << " x " << H);
      TestWeight w = make_weight(*this, dtype, 2 * I, H, 21);
      auto x = randn(9 * H, 22);
      Tensor xd = upload(x.data(), DType::f32, {9, H});
      for (int64_t m : {1, 2, 3, 8, 9}) {
        SCOPED_TRACE(testing::Message() << m << " rows");
        Tensor apart = device_f32(m, I), fused = device_f32(m, I);
        timed->timing_report();  // (forgets the ops before)
        {
          ScopedEnv off("HIBANA_CUDA_FUSED_SWIGLU", "0");
          timed->matmul_swiglu(xd.slice_rows(0, m), w.dev, apart);
          EXPECT_NE(timed->timing_report().find("silu_mul"), std::string::npos);
        }
        {
          ScopedEnv on("HIBANA_CUDA_FUSED_SWIGLU", "1");
          timed->matmul_swiglu(xd.slice_rows(0, m), w.dev, fused);
          const std::string ops = timed->timing_report();
          EXPECT_EQ(ops.find("silu_mul") == std::string::npos, m <= 8) << ops;
          EXPECT_EQ(ops.find("matmul_swiglu") != std::string::npos, m <= 8) << ops;
        }
        const std::vector<float> a = download(apart), f = download(fused);
        EXPECT_EQ(std::memcmp(a.data(), f.data(), a.size() * sizeof(float)), 0);
        std::vector<float> ref(m * I);
        cpu->matmul_swiglu(Tensor(x.data(), DType::f32, {m, H}), w.host,
                           Tensor(ref.data(), DType::f32, {m, I}));
        EXPECT_LT(max_abs_diff(f, ref), 1e-4f);
      }
    }
  }
}

// Rows [r0, r0 + n) of a matrix (and of its 128-row scale blocks: r0 and n multiples of 128).
Weight rows_of(const Weight& w, int64_t r0, int64_t n) {
  Weight part = w;
  part.w = w.w.slice_rows(r0, r0 + n);
  if (!w.scale.empty()) part.scale = w.scale.slice_rows(r0 / 128, (r0 + n) / 128);
  return part;
}

// MoE experts against the CPU, and the first 1, 3 and 8 tokens' bits (the decode kernel) the
// same as in the batch of 40 (~10 rows per expert: groups of more than 8 rows take the
// small-batch kernel, the others the decode one). Stacked: each expert's gate and up rows in
// one [2I, H] matrix, one grouped launch for both (as move_weights stacks them on a GPU), which
// at up to 8 tokens can also compute silu(gate) * up (HIBANA_CUDA_FUSED_SWIGLU=1), and whose
// down projection may stream its weights before it waits (HIBANA_CUDA_GROUPED_PREFETCH=1):
// the same bits. And one token with its routing in the same op (moe_route_experts).
// one_cta_tokens: up to how many tokens the stacked fp8 gate/up's fused SwiGLU launches run
// the splits of a row in one CTA (HIBANA_CUDA_CTA_SPLITS; 0: none). bf16_one_split: every bf16
// launch of these shapes is one split (no split partials).
void expect_moe_matches_cpu(CudaOps& t, int64_t H, int64_t I, bool stacked,
                            int64_t one_cta_tokens = 0, bool bf16_one_split = false) {
  const int64_t E = 8, k = 2, T = 40;
  for (DType dtype : {DType::bf16, DType::f8_e4m3}) {
    SCOPED_TRACE(dtype_name(dtype));
    ExpertSet set;
    if (stacked) {
      for (int64_t e = 0; e < E; ++e) {
        set.keep.push_back(make_weight(t, dtype, 2 * I, H, static_cast<uint32_t>(4000 + 2 * e)));
        set.keep.push_back(make_weight(t, dtype, H, I, static_cast<uint32_t>(4001 + 2 * e)));
      }
      for (int64_t e = 0; e < E; ++e) {
        const TestWeight &gu = set.keep[2 * e], &d = set.keep[2 * e + 1];
        set.host.gate.push_back(rows_of(gu.host, 0, I));
        set.host.up.push_back(rows_of(gu.host, I, I));
        set.host.down.push_back(d.host);
        set.dev.gate.push_back(rows_of(gu.dev, 0, I));
        set.dev.up.push_back(rows_of(gu.dev, I, I));
        set.dev.down.push_back(d.dev);
        set.dev.gate_up.push_back(gu.dev);
      }
    } else {
      set = make_experts(t, E, H, I, 3000, dtype);
    }
    auto x = randn(T * H, 11), logits = randn(T * E, 12);
    auto [idd, wd, ref, ids, weights] = t.route_both(x, logits, T, E, k, H, set.host);
    Tensor xd = t.upload(x.data(), DType::f32, {T, H});
    Tensor out = t.device_f32(T, H);
    const int64_t small_before = cuda_grouped_small_passes();
    t.gpu->moe_experts(xd, idd, wd, set.dev, out);
    std::vector<float> all = t.download(out);
    EXPECT_LT(t.max_abs_diff(all, ref), 1e-4f);
    const int64_t passes = cuda_grouped_small_passes() - small_before;
    EXPECT_GT(passes, 0) << "no decode-kernel pass at 40 tokens";
    {  // the groups of up to 8 rows by the batch kernels wherever the decode kernel's split
       // partials would pass 1 KiB (as in a long prefill pass); a launch of one split, which
       // needs no partials, keeps its pass
      const int64_t before = cuda_grouped_small_passes();
      ScopedEnv partials("HIBANA_CUDA_GEMV_PARTIALS_KB", "1");
      Tensor again = t.device_f32(T, H);
      t.gpu->moe_experts(xd, idd, wd, set.dev, again);
      const int64_t kept = cuda_grouped_small_passes() - before;
      if (dtype == DType::bf16 && bf16_one_split) {
        EXPECT_EQ(kept, passes) << "a launch of one split left its pass";
      } else {
        EXPECT_LT(kept, passes) << "no launch with split partials left its pass";
      }
      EXPECT_EQ(std::memcmp(t.download(again).data(), all.data(), T * H * sizeof(float)), 0)
          << "the groups of up to 8 rows by the batch kernels";
    }
    for (int64_t m : {1, 3, 8}) {
      for (const char* knobs : {"00", "10", "01", "11"}) {
        ScopedEnv fuse("HIBANA_CUDA_FUSED_SWIGLU", knobs[0] == '1' ? "1" : "0");
        ScopedEnv prefetch("HIBANA_CUDA_GROUPED_PREFETCH", knobs[1] == '1' ? "1" : "0");
        Tensor part = t.device_f32(m, H);
        const int64_t before = cuda_one_cta_split_products();
        t.gpu->moe_experts(xd.slice_rows(0, m), idd.slice_rows(0, m), wd.slice_rows(0, m), set.dev,
                           part);
        const bool one_cta = m <= one_cta_tokens && dtype == DType::f8_e4m3 && knobs[0] == '1';
        EXPECT_EQ(cuda_one_cta_split_products() - before, one_cta ? 1 : 0) << "in one CTA";
        EXPECT_EQ(std::memcmp(t.download(part).data(), all.data(), m * H * sizeof(float)), 0)
            << m << " tokens, fused SwiGLU and down prefetch " << knobs;
      }
    }
    // One token through moe_route_experts (its routing and its experts in one op), whose
    // gate/up launches split the token's activations before their wait
    // (HIBANA_CUDA_EXPERTS_X_EARLY, on by default) or after it, with the SwiGLU in the gate/up
    // launch or after it: the same ids, and the bits of the token in the batch of 40, every
    // way. Each way takes another token (9, 10, ...), so the experts'
    // scratch holds other tokens' values before it: a slice that stored nothing would show.
    int64_t tok = 9;
    for (const char* early : {"11", "01", "10", "00"}) {
      ScopedEnv knob("HIBANA_CUDA_EXPERTS_X_EARLY", early[0] == '1' ? "1" : "0");
      ScopedEnv swiglu("HIBANA_CUDA_FUSED_SWIGLU", early[1] == '1' ? "1" : "0");
      const Tensor lg = t.upload(logits.data() + tok * E, DType::f32, {1, E});
      const std::vector<int32_t> zero(k, 0);
      Tensor one_ids = t.upload(zero.data(), DType::i32, {1, k});
      Tensor one_w = t.device_f32(1, k), one = t.device_f32(1, H);
      t.gpu->moe_route_experts(xd.slice_rows(tok, tok + 1), lg, k, true, Tensor{}, set.dev, one_ids,
                               one_w, one, nullptr);
      std::vector<int32_t> got_ids(k);
      copy_to_host(one_ids, got_ids.data());
      EXPECT_EQ(got_ids, std::vector<int32_t>(ids.begin() + tok * k, ids.begin() + (tok + 1) * k))
          << early;
      EXPECT_EQ(std::memcmp(t.download(one).data(), all.data() + tok * H, H * sizeof(float)), 0)
          << "token " << tok << " through moe_route_experts, x early, fused SwiGLU " << early;
      ++tok;
    }
  }
}

// Expert products long enough to be split, so that the grouped launches add split partials
// (the reduction no other MoE test reaches: their products are one split each). At the grouped
// tile target of 8 (bf16; fp8 32), a matrix of at most 512 rows (fp8 2048) and at least 1024
// columns takes 2 splits of 512 (fp8 more): H = 1024, I = 512 splits gate and up; H = 512,
// I = 1024 the down projection; stacked, H = 1024, I = 256 the [512, 1024] gate/up (the fused
// SwiGLU's partials carry gate and up apart; in fp8 its 2 splits run in one CTA at 1-8 tokens,
// and must give the same bits). And the 80B's shapes stacked (I = 512, H = 2048): in bf16 one
// split each, its fp8 gate/up in 4 splits, in one CTA at one token.
TEST_F(CudaOps, MoeWithSplitExpertProductsMatchesCpu) {
  expect_moe_matches_cpu(*this, 1024, 512, false);
  expect_moe_matches_cpu(*this, 512, 1024, false);
  expect_moe_matches_cpu(*this, 1024, 256, true, 8);
  expect_moe_matches_cpu(*this, 2048, 512, true, 1, true);
}

// Expert parallelism on the GPU: a rank keeps its block of experts (other ids -1, weight 0),
// its grouped launches skip the others, and the combine adds nothing for them — a token whose
// experts all live on the other rank gets exactly 0 (not the NaN of an unwritten row) — and
// the two ranks' outputs add up to the whole op's.
TEST_F(CudaOps, MoeExpertsSplitIntoBlocksAddUpToTheWhole) {
  const int64_t H = 128, I = 64, E = 4;
  std::vector<TestWeight> keep_w;
  ExpertWeights all;
  for (int64_t e = 0; e < E; ++e) {
    keep_w.push_back(make_weight(*this, DType::bf16, I, H, static_cast<uint32_t>(500 + e)));
    keep_w.push_back(make_weight(*this, DType::bf16, I, H, static_cast<uint32_t>(600 + e)));
    keep_w.push_back(make_weight(*this, DType::bf16, H, I, static_cast<uint32_t>(700 + e)));
  }
  for (int64_t e = 0; e < E; ++e) {
    all.gate.push_back(keep_w[3 * e].dev);
    all.up.push_back(keep_w[3 * e + 1].dev);
    all.down.push_back(keep_w[3 * e + 2].dev);
  }
  test::expect_expert_blocks_add_up(*gpu, all, H);
}

}  // namespace
}  // namespace hibana
