// CUDA kernels against the CPU backend at shapes the tiny fixture models do not reach (split-K
// matmuls, attention over several KV splits, grouped MoE with many tokens), and the promise
// that a row's result is bit-identical whatever else is in the batch. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>

#include "backend/backend.h"
#include "core/device_memory.h"
#include "core/numeric.h"
#include "support/cuda_fixture.h"
#include "support/moe_blocks.h"
#include "support/random.h"

namespace hibana {
namespace {

using test::randn;

class CudaOps : public test::CudaFixture {
 public:
  Tensor device_f32(int64_t rows, int64_t cols) {
    std::vector<float> zeros(rows * cols, 0.0f);
    return upload(zeros.data(), DType::f32, {rows, cols});
  }
  static float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float worst = 0.0f;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i)
      worst = std::max(worst, std::fabs(a[i] - b[i]));
    return worst;
  }

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
    cpu->moe_route(Tensor(logits.data(), DType::f32, {T, E}), k, true,
                   Tensor(ids.data(), DType::i32, {T, k}),
                   Tensor(weights.data(), DType::f32, {T, k}));
    cpu->moe_experts(Tensor(x.data(), DType::f32, {T, H}), Tensor(ids.data(), DType::i32, {T, k}),
                     Tensor(weights.data(), DType::f32, {T, k}), host,
                     Tensor(ref.data(), DType::f32, {T, H}));
    const std::vector<int32_t> zero_ids(T * k, 0);
    Tensor idd = upload(zero_ids.data(), DType::i32, {T, k});
    Tensor wd = device_f32(T, k);
    gpu->moe_route(upload(logits.data(), DType::f32, {T, E}), k, true, idd, wd);
    std::vector<int32_t> gids(T * k);
    copy_to_host(idd, gids.data());
    EXPECT_EQ(gids, ids);
    EXPECT_LT(max_abs_diff(download(wd), weights), 1e-6f);
    return {idd, wd, std::move(ref), std::move(ids), std::move(weights)};
  }

  // Attention over a whole batch (host and device layouts of the same tokens) on the CPU, the
  // reference, and on the GPU, from random q/k/v seeded from `seed`: the GPU's outputs must be
  // within 1e-5 of the CPU's; its inputs stay for single-token comparisons.
  struct AttentionBatch {
    Tensor qd, kd, vd;
    std::vector<float> got;
  };
  AttentionBatch attention_batch(int64_t heads, int64_t kvh, int64_t hd, int64_t pages,
                                 int64_t page, uint32_t seed, const BatchLayout& host,
                                 const BatchLayout& dev) {
    const int64_t T = host.num_tokens;
    auto q = randn(T * heads * hd, seed), k = randn(T * kvh * hd, seed + 1),
         v = randn(T * kvh * hd, seed + 2);
    std::vector<float> kp(pages * kvh * page * hd), vp(kp.size()), ref(T * heads * hd);
    Tensor kpt(kp.data(), DType::f32, {pages, kvh, page, hd}),
        vpt(vp.data(), DType::f32, {pages, kvh, page, hd});
    cpu->store_kv(Tensor(k.data(), DType::f32, {T, kvh * hd}),
                  Tensor(v.data(), DType::f32, {T, kvh * hd}), kpt, vpt, host);
    cpu->attention(Tensor(q.data(), DType::f32, {T, heads * hd}), heads, kpt, vpt, 0.125f, host,
                   Tensor(ref.data(), DType::f32, {T, heads * hd}));
    AttentionBatch b;
    std::vector<float> zeros(kp.size(), 0.0f);
    b.kd = upload(zeros.data(), DType::f32, {pages, kvh, page, hd});
    b.vd = upload(zeros.data(), DType::f32, {pages, kvh, page, hd});
    b.qd = upload(q.data(), DType::f32, {T, heads * hd});
    gpu->store_kv(upload(k.data(), DType::f32, {T, kvh * hd}),
                  upload(v.data(), DType::f32, {T, kvh * hd}), b.kd, b.vd, dev);
    Tensor out = device_f32(T, heads * hd);
    gpu->attention(b.qd, heads, b.kd, b.vd, 0.125f, dev, out);
    b.got = download(out);
    EXPECT_LT(max_abs_diff(b.got, ref), 1e-5f);
    return b;
  }
  void check_token_blocks(int64_t heads, int64_t kvh, int64_t hd);
};

// Weights of one dtype on both devices (fp8 with 128 x 128 block scales).
struct TestWeight {
  Weight host, dev;
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
};

TestWeight make_weight(CudaOps& t, DType dtype, int64_t N, int64_t K, uint32_t seed) {
  TestWeight w;
  auto vals = randn(N * K, seed, 0.05f);
  const int64_t sr = (N + 127) / 128, sc = (K + 127) / 128;
  w.bytes.resize(N * K * dtype_size(dtype));
  if (dtype == DType::f8_e4m3) {
    w.scales.resize(sr * sc);
    for (int64_t i = 0; i < sr * sc; ++i) w.scales[i] = 0.01f * (1 + i % 5);
  }
  for (int64_t i = 0; i < N * K; ++i) {
    switch (dtype) {
      case DType::f32:
        std::memcpy(&w.bytes[i * 4], &vals[i], 4);
        break;
      case DType::bf16: {
        uint16_t b = f32_to_bf16(vals[i]);
        std::memcpy(&w.bytes[i * 2], &b, 2);
        break;
      }
      default:
        w.bytes[i] = f32_to_f8e4m3(vals[i] / w.scales[(i / K / 128) * sc + (i % K) / 128]);
    }
  }
  w.host.w = Tensor(w.bytes.data(), dtype, {N, K});
  w.dev.w = t.upload(w.bytes.data(), dtype, {N, K});
  if (dtype == DType::f8_e4m3) {
    w.host.scale = Tensor(w.scales.data(), DType::f32, {sr, sc});
    w.dev.scale = t.upload(w.scales.data(), DType::f32, {sr, sc});
    w.host.block_rows = w.dev.block_rows = 128;
    w.host.block_cols = w.dev.block_cols = 128;
  }
  return w;
}

TEST_F(CudaOps, MatmulMatchesCpuAndEveryBatchSizeGivesTheSameBits) {
  // K gives several splits; M > 64 runs them serially in the tensor-core kernel, M > 32 in the
  // SIMT one.
  const int64_t N = 600, K = 3072, M = 300;
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

// The decode kernel (up to 8 rows) splits the activations once per CTA into shared memory
// where a split's rows fit (here: up to 6 rows of 640 k) and per warp in registers where they
// do not (7 and 8 rows); up to 2 rows it packs their terms into one mma's columns. Every way
// must give the bits of the larger batch's kernel.
void expect_decode_rows_match_batch(CudaOps& t, int64_t N, int64_t K,
                                    std::initializer_list<int64_t> rows) {
  const int64_t M = 40;
  auto x = randn(M * K, 5);
  for (DType dtype : {DType::bf16, DType::f8_e4m3}) {
    SCOPED_TRACE(dtype_name(dtype));
    TestWeight w = make_weight(t, dtype, N, K, 3);
    Tensor xd = t.upload(x.data(), DType::f32, {M, K});
    Tensor full = t.device_f32(M, N);
    t.gpu->matmul(xd, w.dev, full);
    std::vector<float> all = t.download(full);
    for (int64_t m : rows) {
      Tensor part = t.device_f32(m, N);
      t.gpu->matmul(xd.slice_rows(0, m), w.dev, part);
      EXPECT_EQ(std::memcmp(t.download(part).data(), all.data(), m * N * sizeof(float)), 0)
          << "the first " << m << " rows differ from the same rows in a batch of " << M;
    }
  }
}

TEST_F(CudaOps, DecodeMatmulGivesTheSameBitsWithSharedAndPerWarpActivations) {
  expect_decode_rows_match_batch(*this, 200, 1280, {1, 2, 3, 6, 7, 8});  // two splits of 640
}

// More than 132 tiles of 128 rows leave K in one split: a row of 4608 k does not fit in shared
// memory, so 1 and 2 rows take the packed kernel with per-warp activations.
TEST_F(CudaOps, PackedDecodeMatmulWithPerWarpActivationsGivesTheSameBits) {
  expect_decode_rows_match_batch(*this, 17000, 4608, {1, 2});
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
    std::vector<float> padded(M * (K + 8), std::nanf(""));
    for (int64_t r = 0; r < M; ++r)
      std::copy(x.begin() + r * K, x.begin() + (r + 1) * K, padded.begin() + r * (K + 8));
    Tensor fenced_x = upload(padded.data(), DType::f32, {M, K + 8});
    fenced_x.shape[1] = K;
    Tensor fenced = device_f32(M, N);
    gpu->matmul(fenced_x, w.dev, fenced);
    EXPECT_EQ(std::memcmp(download(fenced).data(), all.data(), M * N * sizeof(float)), 0)
        << "columns past K were read";
    gpu->matmul(fenced_x.slice_rows(M - 1, M), w.dev, one);
    EXPECT_EQ(std::memcmp(download(one).data(), all.data() + (M - 1) * N, N * sizeof(float)), 0)
        << "columns past K were read (one row)";
  }
}

TEST_F(CudaOps, AttentionOverSeveralSplitsMatchesCpuAndDecodeMatchesPrefill) {
  const int64_t T = 600, heads = 4, kvh = 2, hd = 64, page = 64, pages = (T + page - 1) / page;
  std::vector<int32_t> pos(T), seq(T, 0), start = {0, static_cast<int32_t>(T)}, table(pages),
                                          slot(T), state = {-1}, snap(T, -1);
  for (int64_t i = 0; i < T; ++i) pos[i] = slot[i] = static_cast<int32_t>(i);
  for (int64_t p = 0; p < pages; ++p) table[p] = static_cast<int32_t>(pages - 1 - p);  // scrambled
  for (int64_t i = 0; i < T; ++i) slot[i] = table[i / page] * page + i % page;
  auto layout_on = [&](bool device, int64_t t0, int64_t n) {
    BatchLayout l;
    l.num_tokens = n;
    l.num_seqs = 1;
    l.page_size = page;
    l.max_pages = pages;
    std::vector<int32_t> st = {0, static_cast<int32_t>(n)};
    auto make = [&](const int32_t* d, int64_t len) {
      return device ? upload(d, DType::i32, {len})
                    : Tensor(const_cast<int32_t*>(d), DType::i32, {len});
    };
    l.positions = make(pos.data() + t0, n);
    l.token_seq = make(seq.data() + t0, n);
    l.seq_start =
        device ? upload(st.data(), DType::i32, {2}) : Tensor(start.data(), DType::i32, {2});
    l.page_table = make(table.data(), pages);
    l.kv_slot = make(slot.data() + t0, n);
    l.state_slot = make(state.data(), 1);
    l.snapshot_slot = make(snap.data() + t0, n);
    return l;
  };
  const AttentionBatch all = attention_batch(heads, kvh, hd, pages, page, 1, layout_on(false, 0, T),
                                             layout_on(true, 0, T));
  const std::vector<float>& got = all.got;

  // The last token on its own (a decode step) gives the same bits as inside the prefill.
  BatchLayout one = layout_on(true, T - 1, 1);
  Tensor last = device_f32(1, heads * hd);
  gpu->attention(all.qd.slice_rows(T - 1, T), heads, all.kd, all.vd, 0.125f, one, last);
  std::vector<float> alone = download(last);
  EXPECT_EQ(
      std::memcmp(alone.data(), got.data() + (T - 1) * heads * hd, heads * hd * sizeof(float)), 0);
}

// Prefill launches take blocks of consecutive tokens of one sequence per CTA (the register-tiled
// kernel). Three sequences in one launch (13, 1 and 300 tokens: blocks end inside each) match
// the CPU, and every token gives the same bits as when it is decoded alone (the per-token
// kernel) or prefilled in a chunk that starts elsewhere.
TEST_F(CudaOps, AttentionTokenBlocksMatchCpuAndEachTokenAlone) {
  // Qwen3-8B's heads (group 4, head_dim 128: 32 tokens per block) and Qwen3-Next's (group 8,
  // head_dim 256: 8 tokens per block).
  for (auto [heads, kvh, hd] : {std::tuple<int64_t, int64_t, int64_t>{8, 2, 128}, {16, 2, 256}}) {
    SCOPED_TRACE("heads " + std::to_string(heads) + ", head_dim " + std::to_string(hd));
    check_token_blocks(heads, kvh, hd);
  }
}

void CudaOps::check_token_blocks(int64_t heads, int64_t kvh, int64_t hd) {
  const int64_t page = 16;
  const std::vector<int64_t> lens = {13, 1, 300};
  const int64_t S = static_cast<int64_t>(lens.size());
  int64_t T = 0, max_pages = 0, pages = 0;
  for (int64_t n : lens) {
    T += n;
    max_pages = std::max(max_pages, (n + page - 1) / page);
    pages += (n + page - 1) / page;
  }
  // Sequence s owns pages handed out from the top down; its table row is padded with page 0.
  std::vector<int32_t> pos, seq, start = {0}, table(S * max_pages, 0), slot, state(S, -1), snap;
  int32_t next_page = static_cast<int32_t>(pages);
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t p = 0; p < (lens[s] + page - 1) / page; ++p)
      table[s * max_pages + p] = --next_page;
    for (int64_t i = 0; i < lens[s]; ++i) {
      pos.push_back(static_cast<int32_t>(i));
      seq.push_back(static_cast<int32_t>(s));
      slot.push_back(static_cast<int32_t>(table[s * max_pages + i / page] * page + i % page));
      snap.push_back(-1);
    }
    start.push_back(static_cast<int32_t>(pos.size()));
  }
  // Tokens [t0, t0 + n) of sequence s alone (device), or the whole batch (host or device).
  auto layout = [&](bool device, int64_t s, int64_t t0, int64_t n) {
    BatchLayout l;
    const bool all = s < 0;
    l.num_tokens = all ? T : n;
    l.num_seqs = all ? S : 1;
    l.page_size = page;
    l.max_pages = max_pages;
    auto make = [&](const int32_t* d, int64_t len) {
      return device ? upload(d, DType::i32, {len})
                    : Tensor(const_cast<int32_t*>(d), DType::i32, {len});
    };
    static const std::vector<int32_t> zeros(1024, 0);
    const int64_t first = all ? 0 : start[s] + t0;
    std::vector<int32_t> st = {0, static_cast<int32_t>(n)};
    l.positions = make(pos.data() + first, l.num_tokens);
    l.token_seq = all ? make(seq.data(), T) : make(zeros.data(), n);
    l.seq_start = all ? make(start.data(), S + 1) : upload(st.data(), DType::i32, {2});
    l.page_table = make(table.data() + (all ? 0 : s * max_pages), (all ? S : 1) * max_pages);
    l.kv_slot = make(slot.data() + first, l.num_tokens);
    l.state_slot = make(state.data(), l.num_seqs);
    l.snapshot_slot = make(snap.data() + first, l.num_tokens);
    return l;
  };
  const AttentionBatch all = attention_batch(heads, kvh, hd, pages, page, 21,
                                             layout(false, -1, 0, T), layout(true, -1, 0, T));
  const std::vector<float>& got = all.got;

  const int64_t row = heads * hd;
  auto same_as_batch = [&](int64_t s, int64_t t0, int64_t n) {
    Tensor part = device_f32(n, row);
    const int64_t first = start[s] + t0;
    gpu->attention(all.qd.slice_rows(first, first + n), heads, all.kd, all.vd, 0.125f,
                   layout(true, s, t0, n), part);
    std::vector<float> mine = download(part);
    return std::memcmp(mine.data(), got.data() + first * row, n * row * sizeof(float)) == 0;
  };
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t t = 0; t < lens[s]; t += (t % 7 == 0 ? 1 : 5))
      EXPECT_TRUE(same_as_batch(s, t, 1)) << "sequence " << s << " token " << t << " alone";
  }
  EXPECT_TRUE(same_as_batch(2, 101, 150)) << "a chunk of the long sequence";
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

// Routing and grouping with more experts than the kernels keep per thread (E > 512: the router
// keeps its probabilities in memory, each grouping thread owns two experts), and each expert's
// [gate ; up] read as one stacked matrix: the same bits as gate and up apart, and the CPU's
// results.
TEST_F(CudaOps, MoeWithManyExpertsAndStackedGateUpMatchesCpu) {
  for (const int64_t E : {int64_t{512}, int64_t{1100}}) {
    SCOPED_TRACE(E);
    const int64_t k = 8, H = 128, I = 64, T = 40;
    ExpertWeights host, dev, stacked;
    std::vector<TestWeight> keep_w;
    for (int64_t e = 0; e < E; ++e) {
      for (int m = 0; m < 3; ++m) {
        const bool down = m == 2;
        keep_w.push_back(make_weight(*this, DType::bf16, down ? H : I, down ? I : H,
                                     static_cast<uint32_t>(1000 + 3 * e + m)));
      }
      const TestWeight &g = keep_w[3 * e], &u = keep_w[3 * e + 1], &d = keep_w[3 * e + 2];
      host.gate.push_back(g.host);
      host.up.push_back(u.host);
      host.down.push_back(d.host);
      dev.gate.push_back(g.dev);
      dev.up.push_back(u.dev);
      dev.down.push_back(d.dev);
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
