// CUDA ops that fuse several Backend ops (attention_prep, moe_route_experts with and without its
// residual norm, matmul_conv, matmul_gated_norm) give the bits of the ops they replace, run one by
// one on the same GPU, and match the CPU. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "core/device_memory.h"
#include "core/numeric.h"
#include "support/cuda_fixture.h"
#include "support/cuda_weights.h"
#include "support/random.h"
#include "support/scoped_env.h"

namespace hibana {
namespace {

using test::randn;
using test::ScopedEnv;

class CudaFusedOps : public test::CudaFixture {
 public:
  using Named = std::tuple<const char*, Tensor, Tensor>;
  // Each named pair of device tensors (contiguous, one shape and dtype) holds the same bytes:
  // the fused op's result and the separate ops'.
  static void expect_same_bytes(std::initializer_list<Named> pairs) {
    for (const auto& [name, a, b] : pairs) {
      std::vector<uint8_t> x(a.nbytes()), y(b.nbytes());
      copy_to_host(a, x.data());
      copy_to_host(b, y.data());
      EXPECT_TRUE(x == y) << name;
    }
  }
  static std::vector<int32_t> download_ids(const Tensor& t) {
    std::vector<int32_t> v(t.numel());
    copy_to_host(t, v.data());
    return v;
  }
};

struct PrepCase {
  int64_t heads, kv_heads, head_dim, rot_dim;
  bool zero_centred;
};

// The fused kernel (Qwen3-8B's heads, Qwen3-Next's gated attention with a quarter of each head
// rotated and zero-centred norms, and head_dim 64), and a shape it does not take (rotated half
// of 48: the separate kernels), against the ops one by one on the GPU (bit for bit: q, k and
// both pages) and on the CPU. q is a column view of a wider projection, as in the layers; one
// row is a padding row (slot -1) whose K and V must not be stored.
TEST_F(CudaFusedOps, AttentionPrepHasTheBitsOfNormsRopeAndStoreKv) {
  // Row 2 is a padding row on the GPU (slot -1: nothing stored). The CPU stores every row, so
  // its reference puts that row in a slot no other row uses (50) and clears it afterwards.
  const std::vector<int32_t> pos = {0, 7, 100, 1000, 4095}, slot = {3, 40, -1, 17, 62},
                             cpu_slot = {3, 40, 50, 17, 62};
  const int64_t T = static_cast<int64_t>(pos.size()), page = 16, pages = 4;
  for (const PrepCase& c : {PrepCase{8, 2, 128, 128, false}, PrepCase{16, 2, 256, 64, true},
                            PrepCase{4, 2, 64, 64, false}, PrepCase{4, 2, 96, 96, false}}) {
    SCOPED_TRACE("head_dim " + std::to_string(c.head_dim) + ", rotated " +
                 std::to_string(c.rot_dim));
    const int64_t hd = c.head_dim, qw = 2 * c.heads * hd, kw = c.kv_heads * hd;
    const std::vector<float> q0 = randn(T * qw, 1, 2.0f), k0 = randn(T * kw, 2, 2.0f),
                             v0 = randn(T * kw, 3), qn = randn(hd, 4), kn = randn(hd, 5);
    const std::vector<float> zero_pages(pages * c.kv_heads * page * hd, 0.0f);
    const Backend::AttentionPrep a{c.heads, c.kv_heads, hd, c.rot_dim, 1e6, 1e-6f, c.zero_centred};
    struct Run {
      Tensor proj, k, kp, vp;  // proj: [q | gate], q the first heads * hd columns
    };
    auto layout_on = [&](bool device) {
      BatchLayout l;
      l.num_tokens = T;
      l.num_seqs = 1;
      l.page_size = page;
      l.max_pages = pages;
      l.positions = device ? upload(pos.data(), DType::i32, {T})
                           : Tensor(const_cast<int32_t*>(pos.data()), DType::i32, {T});
      l.kv_slot = device ? upload(slot.data(), DType::i32, {T})
                         : Tensor(const_cast<int32_t*>(cpu_slot.data()), DType::i32, {T});
      return l;
    };
    const Tensor v = upload(v0.data(), DType::f32, {T, kw});
    const Tensor qnd = upload(qn.data(), DType::f32, {hd}),
                 knd = upload(kn.data(), DType::f32, {hd});
    const BatchLayout dl = layout_on(true);
    auto run_gpu = [&](bool fused) {
      Run r;
      r.proj = upload(q0.data(), DType::f32, {T, qw});
      const Tensor q = first_columns(r.proj, c.heads * hd);
      r.k = upload(k0.data(), DType::f32, {T, kw});
      r.kp = upload(zero_pages.data(), DType::f32, {pages, c.kv_heads, page, hd});
      r.vp = upload(zero_pages.data(), DType::f32, {pages, c.kv_heads, page, hd});
      if (fused) {
        gpu->attention_prep(q, r.k, v, qnd, knd, a, r.kp, r.vp, dl);
      } else {
        gpu->Backend::attention_prep(q, r.k, v, qnd, knd, a, r.kp, r.vp, dl);
      }
      return r;
    };
    const Run fused = run_gpu(true), parts = run_gpu(false);
    expect_same_bytes({{"q", fused.proj, parts.proj},
                       {"k", fused.k, parts.k},
                       {"k pages", fused.kp, parts.kp},
                       {"v pages", fused.vp, parts.vp}});

    // The CPU's ops, one by one.
    std::vector<float> q = q0, k = k0, v1 = v0, kp = zero_pages, vp = zero_pages;
    Tensor qc(q.data(), DType::f32, {T, qw}), kc(k.data(), DType::f32, {T, kw});
    Tensor kpc(kp.data(), DType::f32, {pages, c.kv_heads, page, hd});
    Tensor vpc(vp.data(), DType::f32, {pages, c.kv_heads, page, hd});
    std::vector<float> qn1 = qn, kn1 = kn;
    cpu->attention_prep(first_columns(qc, c.heads * hd), kc, Tensor(v1.data(), DType::f32, {T, kw}),
                        Tensor(qn1.data(), DType::f32, {hd}), Tensor(kn1.data(), DType::f32, {hd}),
                        a, kpc, vpc, layout_on(false));
    for (int64_t h = 0; h < c.kv_heads; ++h) {  // the padding row's slot: empty on the GPU
      const int64_t at = ((cpu_slot[2] / page * c.kv_heads + h) * page + cpu_slot[2] % page) * hd;
      std::fill(kp.begin() + at, kp.begin() + at + hd, 0.0f);
      std::fill(vp.begin() + at, vp.begin() + at + hd, 0.0f);
    }
    const std::vector<float> gq = download(fused.proj), gk = download(fused.k),
                             gkp = download(fused.kp), gvp = download(fused.vp);
    float worst = 0.0f;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < c.heads * hd; ++i) {
        worst = std::max(worst, std::fabs(gq[t * qw + i] - q[t * qw + i]));
      }
    }
    for (size_t i = 0; i < k.size(); ++i) worst = std::max(worst, std::fabs(gk[i] - k[i]));
    for (size_t i = 0; i < kp.size(); ++i) {
      worst = std::max(worst, std::fabs(gkp[i] - kp[i]));
      EXPECT_EQ(gvp[i], vp[i]) << "v is copied unchanged, " << i;
    }
    EXPECT_LT(worst, 1e-3f);
    // The padding row's slot stayed empty; the others hold their token's v.
    const int64_t stored = std::count_if(gvp.begin(), gvp.end(), [](float x) { return x != 0; });
    EXPECT_EQ(stored, (T - 1) * kw);
  }
}

// `count` experts ([I, H] gate and up, [H, I] down, bf16) cut from one random pool at row
// offsets that depend on the expert (so experts differ), on both devices: many experts for
// little memory. On the GPU also stacked ([gate ; up], as move_weights stacks them).
struct PooledExperts {
  PooledExperts(test::CudaFixture& f, int64_t count, int64_t H, int64_t I) {
    const int64_t rows = 6 * I;  // offsets below 3I, then gate, up and down (I rows each)
    pool.resize(rows * H);
    const std::vector<float> pv = randn(pool.size(), 31, 0.05f);
    for (size_t i = 0; i < pool.size(); ++i) pool[i] = f32_to_bf16(pv[i]);
    const Tensor on_host(pool.data(), DType::bf16, {rows, H});
    const Tensor on_dev = f.upload(pool.data(), DType::bf16, {rows, H});
    for (int64_t e = 0; e < count; ++e) {
      const int64_t at = (e * 7) % (3 * I);
      for (auto [set, base] : {std::pair<ExpertWeights*, Tensor>{&host, on_host}, {&dev, on_dev}}) {
        auto cut = [&, base = base](int64_t row, int64_t n, int64_t cols) {
          Weight w;
          w.w = Tensor(static_cast<uint16_t*>(base.data) + row * H, DType::bf16, {n, cols},
                       base.device);
          return w;
        };
        set->gate.push_back(cut(at, I, H));
        set->up.push_back(cut(at + I, I, H));
        set->down.push_back(cut(at + 2 * I, H, I));  // [H, I]: H * I / H = I pool rows
        if (set == &dev) set->gate_up.push_back(cut(at, 2 * I, H));  // [gate ; up], stacked
      }
    }
  }
  std::vector<uint16_t> pool;
  ExpertWeights host, dev;
};

struct RouteCase {
  int64_t E, k;
  bool shared;
};

// The routing and the grouping of its pairs in one launch (HIBANA_CUDA_FUSED_ROUTING=1, up to 32
// tokens): the ids, weights and expert outputs of moe_route then moe_experts, bit for bit, and
// the CPU's. Expert counts of each routing kernel (keys in registers: 64 and the 80B's 512 with
// its shared expert as expert 512; in memory: 600), 1, 5 and 32 tokens, and 33 (the two ops).
// One token is routed and grouped in one CTA (route_one_kernel) where its pairs fit a warp:
// top-31 and the shared expert are the most that do, top-32 and the shared expert one more.
// A token with a NaN logit (a padding row's) picks experts 0 .. k-1 on both paths. One token
// also with the shared expert's gate/up slice run before the routing is known and after it
// (HIBANA_CUDA_SHARED_EXPERT_EARLY, on by default).
TEST_F(CudaFusedOps, RoutingAndGroupingInOneLaunchHaveTheBitsOfRouteThenExperts) {
  ScopedEnv timing("HIBANA_CUDA_TIMING", "1");
  const std::unique_ptr<Backend> timed = make_cuda_backend();  // (its timer reads it now)
  const int64_t H = 128, I = 32;
  for (const RouteCase& c :
       {RouteCase{64, 4, false}, RouteCase{512, 10, true}, RouteCase{600, 8, true},
        RouteCase{64, 31, true}, RouteCase{64, 32, true}}) {
    SCOPED_TRACE(testing::Message()
                 << c.E << " experts, top-" << c.k << (c.shared ? " and the shared one" : ""));
    const int64_t experts = c.E + (c.shared ? 1 : 0), pairs = c.k + (c.shared ? 1 : 0);
    const PooledExperts pooled(*this, experts, H, I);
    const ExpertWeights &host = pooled.host, &dev = pooled.dev;
    for (const int64_t T : {int64_t{1}, int64_t{5}, int64_t{32}, int64_t{33}}) {
      SCOPED_TRACE(testing::Message() << T << " tokens");
      std::vector<float> logits = randn(T * c.E, 32), gate = randn(T, 33), x = randn(T * H, 34);
      const int64_t nan_row = T > 1 ? 1 : -1;
      if (nan_row >= 0) logits[nan_row * c.E + 3] = std::nanf("");
      const Tensor lg = upload(logits.data(), DType::f32, {T, c.E}),
                   gd = c.shared ? upload(gate.data(), DType::f32, {T, 1}) : Tensor{},
                   xd = upload(x.data(), DType::f32, {T, H});
      struct Out {
        Tensor ids, weights, out;
      };
      auto outputs = [&] {
        const std::vector<int32_t> zero(T * pairs, 0);
        return Out{upload(zero.data(), DType::i32, {T, pairs}), device_f32(T, pairs),
                   device_f32(T, H)};
      };
      const Out apart = outputs(), fused = outputs();
      timed->moe_route(lg, c.k, true, gd, apart.ids, apart.weights);
      timed->moe_experts(xd, apart.ids, apart.weights, dev, apart.out);
      timed->timing_report();  // (forgets the ops before)
      {
        ScopedEnv on("HIBANA_CUDA_FUSED_ROUTING", "1");
        timed->moe_route_experts(xd, lg, c.k, true, gd, dev, fused.ids, fused.weights, fused.out,
                                 nullptr);
      }
      const std::string ops = timed->timing_report();
      EXPECT_EQ(ops.find("moe_experts") == std::string::npos, T <= 32) << ops;
      expect_same_bytes({{"ids", apart.ids, fused.ids},
                         {"weights", apart.weights, fused.weights},
                         {"out", apart.out, fused.out}});
      // One token again with the shared expert's gate/up after the routing and before it: the
      // same bits. Each on new activations, before their reference: the experts' scratch then
      // holds another token's values, so a slice that stored nothing, or in another pair's
      // row, would show.
      uint32_t seed = 60;
      for (const char* early_on : {"0", "1"}) {
        if (T != 1) break;
        SCOPED_TRACE(testing::Message() << "shared expert early: " << early_on);
        const std::vector<float> x1 = randn(H, seed++);
        const Tensor x1d = upload(x1.data(), DType::f32, {1, H});
        const Out again = outputs(), ref = outputs();
        {
          ScopedEnv on("HIBANA_CUDA_FUSED_ROUTING", "1");
          ScopedEnv early("HIBANA_CUDA_SHARED_EXPERT_EARLY", early_on);
          timed->moe_route_experts(x1d, lg, c.k, true, gd, dev, again.ids, again.weights, again.out,
                                   nullptr);
        }
        timed->moe_route(lg, c.k, true, gd, ref.ids, ref.weights);
        timed->moe_experts(x1d, ref.ids, ref.weights, dev, ref.out);
        expect_same_bytes({{"ids", ref.ids, again.ids}, {"out", ref.out, again.out}});
      }
      const std::vector<int32_t> ids_f = download_ids(fused.ids);
      if (nan_row >= 0) {
        for (int64_t j = 0; j < c.k; ++j) EXPECT_EQ(ids_f[nan_row * pairs + j], j);
      }

      // The CPU's routing and experts, on the rows without a NaN (the CPU gets a 0 there).
      if (nan_row >= 0) logits[nan_row * c.E + 3] = 0.0f;
      std::vector<int32_t> ids_c(T * pairs);
      std::vector<float> w_c(T * pairs), out_c(T * H);
      cpu->moe_route_experts(
          Tensor(x.data(), DType::f32, {T, H}), Tensor(logits.data(), DType::f32, {T, c.E}), c.k,
          true, c.shared ? Tensor(gate.data(), DType::f32, {T, 1}) : Tensor{}, host,
          Tensor(ids_c.data(), DType::i32, {T, pairs}), Tensor(w_c.data(), DType::f32, {T, pairs}),
          Tensor(out_c.data(), DType::f32, {T, H}), nullptr);
      const std::vector<float> w_f = download(fused.weights), out_f = download(fused.out);
      float worst = 0.0f;
      for (int64_t t = 0; t < T; ++t) {
        if (t == nan_row) continue;
        for (int64_t j = 0; j < pairs; ++j) {
          EXPECT_EQ(ids_f[t * pairs + j], ids_c[t * pairs + j]) << t << ", " << j;
          worst = std::max(worst, std::fabs(w_f[t * pairs + j] - w_c[t * pairs + j]));
        }
        for (int64_t i = 0; i < H; ++i) {
          worst = std::max(worst, std::fabs(out_f[t * H + i] - out_c[t * H + i]));
        }
      }
      EXPECT_LT(worst, 1e-4f);
    }
  }
}

// One token's routing in one CTA (route_one_kernel: the top-k through its candidates, the keys
// at least the k-th largest of each warp's largest, gathered where k to 32 reach it, else
// route_token's rounds over every key) picks the CPU's experts with a batch's bits (moe_route,
// and moe_route_experts with the routing in its launch: a warp a token, route_token), and its
// grouping gives the experts' output of moe_route then moe_experts, bit for bit. Rows: random;
// the k largest held by as few lanes as can hold them (experts 7, 39, ...); 20 experts tied for
// the largest, spread over the warps (the threshold is the tied key: 20 gathered, ties to the
// lower experts); 40 tied (more than 32 reach it); one large logit and the rest equal (every
// other probability 0, tied; picks 9, 0, 1, ...: adjacent experts in the grouping); random
// with a NaN (a padding row's: experts 0 .. k-1). Expert counts: the 80B's 512 (16 warps, one
// key each for the threshold), 500 (a warp part empty), 1000 and 1024 (32 warps; keys in
// memory where it falls back), 96 with top-31 (33 tops: always the fallback), 64 with top-31
// (two warps, 16 each), 20 (one warp, part empty).
TEST_F(CudaFusedOps, OneTokenRoutingInOneCtaHasTheBatchsBitsAndTheCpusExperts) {
  const int64_t H = 128, I = 32, T = 6, nan_row = 5;
  for (const RouteCase& c :
       {RouteCase{512, 10, true}, RouteCase{500, 10, false}, RouteCase{1000, 8, true},
        RouteCase{1024, 10, true}, RouteCase{96, 31, false}, RouteCase{64, 31, true},
        RouteCase{20, 4, true}}) {
    SCOPED_TRACE(testing::Message() << c.E << " experts, top-" << c.k);
    const int64_t E = c.E, k = c.k, pairs = k + (c.shared ? 1 : 0);
    const PooledExperts pooled(*this, E + (c.shared ? 1 : 0), H, I);
    std::vector<float> logits = randn(T * E, 41), gate = randn(T, 42), x = randn(T * H, 43);
    const std::vector<float> noise = randn(T * E, 44);
    for (int64_t t = 1; t < 5; ++t) {
      for (int64_t e = 0; e < E; ++e) logits[t * E + e] = -1.0f - std::fabs(noise[t * E + e]);
    }
    const int64_t per_lane = std::max<int64_t>(1, E / 32);
    for (int64_t j = 0; j < k; ++j) logits[E + (7 + 32 * j + j / per_lane) % E] = 4.0f + j;
    for (int64_t j = 0; j < 40; ++j) {
      if (j < 20) logits[2 * E + (3 + 33 * j) % E] = 3.0f;
      logits[3 * E + (3 + 33 * j) % E] = 3.0f;
    }
    for (int64_t e = 0; e < E; ++e) logits[4 * E + e] = e == 9 ? 200.0f : 0.0f;
    logits[nan_row * E + 3] = std::nanf("");
    std::vector<int32_t> ids_c(T * pairs);
    std::vector<float> w_c(T * pairs);
    const Tensor gate_h = c.shared ? Tensor(gate.data(), DType::f32, {T, 1}) : Tensor{};
    cpu->moe_route(Tensor(logits.data(), DType::f32, {T, E}), k, true, gate_h,
                   Tensor(ids_c.data(), DType::i32, {T, pairs}),
                   Tensor(w_c.data(), DType::f32, {T, pairs}));
    const Tensor lg = upload(logits.data(), DType::f32, {T, E}),
                 gd = c.shared ? upload(gate.data(), DType::f32, {T, 1}) : Tensor{},
                 xd = upload(x.data(), DType::f32, {T, H});
    const std::vector<int32_t> zero(T * pairs, 0);
    const Tensor ids = upload(zero.data(), DType::i32, {T, pairs}), w = device_f32(T, pairs);
    gpu->moe_route(lg, k, true, gd, ids, w);
    const std::vector<int32_t> ids_g = download_ids(ids);
    const std::vector<float> w_g = download(w);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < pairs; ++j) {
        const int64_t i = t * pairs + j;
        if (t == nan_row) {
          if (j < k) {
            EXPECT_EQ(ids_g[i], j) << "the NaN row, pick " << j;
          }
          continue;
        }
        EXPECT_EQ(ids_g[i], ids_c[i]) << "row " << t << ", pick " << j;
        EXPECT_LT(std::fabs(w_g[i] - w_c[i]), 1e-6f) << "row " << t << ", pick " << j;
      }
    }
    ScopedEnv on("HIBANA_CUDA_FUSED_ROUTING", "1");
    const Tensor ids_b = upload(zero.data(), DType::i32, {T, pairs}), w_b = device_f32(T, pairs);
    gpu->moe_route_experts(xd, lg, k, true, gd, pooled.dev, ids_b, w_b, device_f32(T, H), nullptr);
    expect_same_bytes({{"ids, batch", ids, ids_b}, {"weights, batch", w, w_b}});
    for (int64_t t = 0; t < T; ++t) {
      SCOPED_TRACE(testing::Message() << "row " << t << " alone");
      const Tensor x1 = xd.slice_rows(t, t + 1), l1 = lg.slice_rows(t, t + 1),
                   g1 = c.shared ? gd.slice_rows(t, t + 1) : Tensor{};
      const Tensor ids1 = upload(zero.data(), DType::i32, {1, pairs}), w1 = device_f32(1, pairs),
                   out1 = device_f32(1, H);
      const Tensor ids_r = upload(zero.data(), DType::i32, {1, pairs}), w_r = device_f32(1, pairs),
                   out_r = device_f32(1, H);
      gpu->moe_route_experts(x1, l1, k, true, g1, pooled.dev, ids1, w1, out1, nullptr);
      gpu->moe_route(l1, k, true, g1, ids_r, w_r);
      gpu->moe_experts(x1, ids_r, w_r, pooled.dev, out_r);
      expect_same_bytes({{"ids", ids.slice_rows(t, t + 1), ids1},
                         {"weights", w.slice_rows(t, t + 1), w1},
                         {"out", out_r, out1}});
    }
  }
}

// A DeltaNet layer's input projection with its conv in one decode-kernel launch
// (HIBANA_CUDA_FUSED_MATMUL_CONV=1) has the bits of the matmul then gdn_conv — the product, the
// conv's outputs, every state slot and a snapshot — and the CPU's to rounding: 1 and 2 rows
// (packed), 3 (one a padding row: slot -1, zero output) and 8; bf16 and fp8; the 80B's [12352,
// 2048] (bf16 two splits, fp8 four: the reducing CTA applies the conv, or the CTA of all) with its
// 8192 conv channels and 4 taps, a [640, 1024] (two splits) with 512 and 2 taps, a [640, 512]
// (one split) with 384 and 5. A prefill-like layout (9 tokens of one sequence) takes the two
// ops.
TEST_F(CudaFusedOps, ConvInTheMatmulHasTheBitsOfTheMatmulThenTheConv) {
  ScopedEnv timing("HIBANA_CUDA_TIMING", "1");
  const std::unique_ptr<Backend> timed = make_cuda_backend();    // (its timer reads it now)
  using Shape = std::tuple<int64_t, int64_t, int64_t, int64_t>;  // N, K, conv channels, taps
  for (auto [N, K, C, taps] :
       {Shape{12352, 2048, 8192, 4}, Shape{640, 1024, 512, 2}, Shape{640, 512, 384, 5}}) {
    const int64_t W = taps - 1;
    for (DType dtype : {DType::bf16, DType::f8_e4m3}) {
      SCOPED_TRACE(testing::Message()
                   << dtype_name(dtype) << " " << N << " x " << K << ", " << taps << " taps");
      const test::TestWeight w = test::make_weight(*this, dtype, N, K, 51);
      const std::vector<float> x = randn(9 * K, 52), cw = randn(C * taps, 53, 0.5f);
      const Tensor xd = upload(x.data(), DType::f32, {9, K}),
                   cwd = upload(cw.data(), DType::f32, {C, taps});
      for (int64_t m : {1, 2, 3, 8, 9}) {
        SCOPED_TRACE(testing::Message() << m << " rows");
        const bool decode = m <= 8;  // m = 9: one sequence of 9 tokens
        const int64_t S = decode ? m : 1, slots = S + 2;
        std::vector<int32_t> seq_start(S + 1), slot_of(S), snaps(m, -1);
        for (int64_t i = 0; i <= S; ++i) seq_start[i] = static_cast<int32_t>(decode ? i : i * 9);
        for (int64_t i = 0; i < S; ++i) slot_of[i] = static_cast<int32_t>(S - 1 - i);
        if (m >= 3 && decode) slot_of[1] = -1;
        if (m >= 2) snaps[0] = static_cast<int32_t>(S);
        const std::vector<float> states0 = randn(slots * C * W, 54);
        const BatchLayout l = recurrent_layout(m, seq_start, slot_of, snaps, true);
        // The product, the conv's outputs and the states, one way.
        auto run = [&](const char* fused, const char* expect_op, const char* one_cta = "1") {
          ScopedEnv knob("HIBANA_CUDA_FUSED_MATMUL_CONV", fused);
          ScopedEnv splits("HIBANA_CUDA_CTA_SPLITS", one_cta);
          Tensor out = device_f32(m, N, 1e30f), co = device_f32(m, C, 1e30f),  // (all written)
              st = upload(states0.data(), DType::f32, {slots, C, W});
          timed->timing_report();  // (forgets the ops before)
          timed->matmul_conv(xd.slice_rows(0, m), w.dev, cwd, st, l, out, co);
          EXPECT_NE(timed->timing_report().find(expect_op), std::string::npos) << expect_op;
          std::vector<float> r = download(out), c = download(co), s2 = download(st);
          r.insert(r.end(), c.begin(), c.end());
          r.insert(r.end(), s2.begin(), s2.end());
          return r;
        };
        const int64_t one_cta = cuda_one_cta_split_products();
        const std::vector<float> apart = run("0", "gdn_conv"),
                                 fused = run("1", decode ? "matmul_conv" : "gdn_conv");
        EXPECT_EQ(std::memcmp(apart.data(), fused.data(), apart.size() * sizeof(float)), 0);
        // The splits of a decode batch (save 2 rows) ran in one CTA, the conv applied there
        // (HIBANA_CUDA_CTA_SPLITS; on a GPU the size of an H100 their CTAs fit one wave): the
        // bits of the split-parallel kernel, whose last CTA applies it. (fp8's 4 splits of
        // 12352 rows are 772 CTAs: one wave or not by the GPU's SMs and the kernel's registers,
        // so which way they ran is not asserted; the bits are.)
        const bool certain = dtype == DType::bf16 || N < 2048;
        if (cuda_shared_memory_per_block() > 101376 && certain) {
          EXPECT_EQ(cuda_one_cta_split_products() - one_cta, decode && m != 2 && K > 512 ? 2 : 0);
        }
        const std::vector<float> parallel = run("1", decode ? "matmul_conv" : "gdn_conv", "0");
        EXPECT_EQ(std::memcmp(parallel.data(), fused.data(), fused.size() * sizeof(float)), 0);
        if (m >= 3 && decode) {
          EXPECT_EQ(fused[m * N + C + C - 1], 0.0f) << "padding row";
        }
        // The CPU (no padding rows there: row 1 gets the unused slot S - 2, not compared).
        std::vector<int32_t> cpu_slots = slot_of;
        if (m >= 3 && decode) cpu_slots[1] = static_cast<int32_t>(S - 2);
        const BatchLayout lc = recurrent_layout(m, seq_start, cpu_slots, snaps, false);
        std::vector<float> x1(x.begin(), x.begin() + m * K), cw1 = cw, st = states0, out(m * N),
                                                             co(m * C);
        cpu->matmul_conv(
            Tensor(x1.data(), DType::f32, {m, K}), w.host,
            Tensor(cw1.data(), DType::f32, {C, taps}), Tensor(st.data(), DType::f32, {slots, C, W}),
            lc, Tensor(out.data(), DType::f32, {m, N}), Tensor(co.data(), DType::f32, {m, C}));
        std::vector<float> ref = out, mine = fused;
        ref.insert(ref.end(), co.begin(), co.end());
        ref.insert(ref.end(), st.begin(), st.end());
        if (m >= 3 && decode) {  // the padding row's conv outputs and the CPU's slot for it
          std::fill_n(ref.begin() + m * N + C, C, 0.0f);
          std::fill_n(mine.begin() + m * N + C, C, 0.0f);
          const int64_t at = m * N + m * C + (S - 2) * C * W;
          std::fill_n(ref.begin() + at, C * W, 0.0f);
          std::fill_n(mine.begin() + at, C * W, 0.0f);
        }
        EXPECT_LT(max_abs_diff(mine, ref), 1e-4f);
      }
    }
  }
}

// The MoE combine with the residual add and the next layer's input norm in one kernel
// (HIBANA_CUDA_COMBINE_NORM_SPLIT, on by default; with and without the fused routing): the FFN
// output, the residual stream and its norm with the bits of moe_route, moe_experts and
// add_rmsnorm, and the CPU's. As in the layers, the norm overwrites the experts' input, and
// every token has 10 routed experts of 16 and the shared one (expert 16): two batches of the
// combine's loads. Rows of 2048 (the 80B's) and 7000 (past the values a thread keeps in
// registers) take the one kernel (no add_rmsnorm op of its own), 512 (add_rmsnorm's two
// kernels) does not; 1, 5 and 40 tokens, plain and zero-centred norms. At 1100 (2200-byte
// bf16 rows) the pooled experts past the first start off a 16-byte boundary: the grouped
// launches must not take their vector loads from the first expert's alignment (they did: a
// run at 1100 faulted, misaligned address).
TEST_F(CudaFusedOps, CombineAddAndNormInOneKernelHaveTheBitsOfTheThreeOps) {
  ScopedEnv timing("HIBANA_CUDA_TIMING", "1");
  const std::unique_ptr<Backend> timed = make_cuda_backend();  // (its timer reads it now)
  const int64_t E = 16, k = 10, pairs = k + 1, I = 32;
  for (const int64_t H : {int64_t{2048}, int64_t{1100}, int64_t{7000}, int64_t{512}}) {
    const PooledExperts pooled(*this, E + 1, H, I);
    for (const int64_t T : {int64_t{1}, int64_t{5}, int64_t{40}}) {
      // zero-centred, fused routing
      for (const char* knobs : {"0 0", "0 1", "1 1"}) {
        SCOPED_TRACE(testing::Message() << H << " wide, " << T << " tokens, " << knobs);
        const bool zc = knobs[0] == '1';
        std::vector<float> logits = randn(T * E, 51), gate = randn(T, 55), xn = randn(T * H, 52),
                           resid = randn(T * H, 53), w = randn(H, 54);
        const Tensor lg = upload(logits.data(), DType::f32, {T, E}),
                     gd = upload(gate.data(), DType::f32, {T, 1}),
                     wd = upload(w.data(), DType::f32, {H});
        struct Out {
          Tensor ids, weights, out, x, xn;  // xn: the experts' input, then the norm
        };
        auto run = [&](bool fused) {
          const std::vector<int32_t> zero(T * pairs, 0);
          Out o{upload(zero.data(), DType::i32, {T, pairs}), device_f32(T, pairs), device_f32(T, H),
                upload(resid.data(), DType::f32, {T, H}), upload(xn.data(), DType::f32, {T, H})};
          const Backend::ResidualNorm then{o.x, wd, 1e-6f, zc, o.xn};
          timed->timing_report();  // (forgets the ops before)
          if (fused) {
            ScopedEnv norm("HIBANA_CUDA_COMBINE_NORM_SPLIT", "1");
            ScopedEnv route("HIBANA_CUDA_FUSED_ROUTING", knobs[2] == '1' ? "1" : "0");
            timed->moe_route_experts(o.xn, lg, k, true, gd, pooled.dev, o.ids, o.weights, o.out,
                                     &then);
            const std::string ops = timed->timing_report();
            EXPECT_EQ(ops.find("add_rmsnorm") == std::string::npos, H >= 1024) << ops;
          } else {
            timed->Backend::moe_route_experts(o.xn, lg, k, true, gd, pooled.dev, o.ids, o.weights,
                                              o.out, &then);
          }
          return o;
        };
        const Out parts = run(false), fused = run(true);
        expect_same_bytes({{"ids", parts.ids, fused.ids},
                           {"weights", parts.weights, fused.weights},
                           {"out", parts.out, fused.out},
                           {"x", parts.x, fused.x},
                           {"normed", parts.xn, fused.xn}});
        const std::vector<int32_t> ids_f = download_ids(fused.ids);

        // The CPU's three ops (its norm into the experts' input too).
        std::vector<int32_t> ids_c(T * pairs);
        std::vector<float> w_c(T * pairs), out_c(T * H), x_c = resid, n_c = xn;
        const Backend::ResidualNorm then_c{Tensor(x_c.data(), DType::f32, {T, H}),
                                           Tensor(w.data(), DType::f32, {H}), 1e-6f, zc,
                                           Tensor(n_c.data(), DType::f32, {T, H})};
        cpu->moe_route_experts(Tensor(n_c.data(), DType::f32, {T, H}),
                               Tensor(logits.data(), DType::f32, {T, E}), k, true,
                               Tensor(gate.data(), DType::f32, {T, 1}), pooled.host,
                               Tensor(ids_c.data(), DType::i32, {T, pairs}),
                               Tensor(w_c.data(), DType::f32, {T, pairs}),
                               Tensor(out_c.data(), DType::f32, {T, H}), &then_c);
        EXPECT_EQ(ids_f, ids_c);
        EXPECT_LT(max_abs_diff(download(fused.out), out_c), 1e-4f);
        EXPECT_LT(max_abs_diff(download(fused.x), x_c), 1e-4f);
        EXPECT_LT(max_abs_diff(download(fused.xn), n_c), 1e-3f);
      }
    }
  }
}
}  // namespace
}  // namespace hibana
