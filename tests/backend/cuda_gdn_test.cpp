// The Gated DeltaNet's chunked form on CUDA (the default for layouts asking for aligned chunks;
// HIBANA_CUDA_GDN_CHUNKED=0 declines it) against the CPU's chunked form: a prefill whose sequences
// start at and off a chunk boundary (tokens before, in and after whole aligned chunks), one too
// short for a chunk, and one with a snapshot (all recurrent, as on the CPU); and the conv's two
// kernels against each other and the CPU. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/device_memory.h"
#include "support/cuda_fixture.h"
#include "support/random.h"
#include "support/scoped_env.h"

namespace hibana {

// How gtest shows a head shape (a test's parameter): key heads x value heads, key x value dims.
static void PrintTo(const Backend::GdnShape& g, std::ostream* os) {
  *os << g.key_heads << "x" << g.value_heads << " heads of " << g.key_dim << " x " << g.value_dim;
}

namespace {

using test::randn;
using test::ScopedEnv;

class CudaGdn : public test::CudaFixture {};

// Sequence i: n[i] tokens from position p0[i], state slot i.
struct Prefill {
  std::vector<int32_t> n, p0;
};

// One instance a head shape (so that compute-sanitizer's racecheck, which multiplies a kernel's
// time by hundreds, can take them one at a time: tools/gpu/pending.sh 4): the 80B's heads; key
// and value dims off multiples of 32 (partial lanes in the q and k norms, a CTA with 16 of its
// 32 state columns); three value heads a key head.
class CudaGdnChunked : public CudaGdn, public testing::WithParamInterface<Backend::GdnShape> {};

INSTANTIATE_TEST_SUITE_P(HeadShapes, CudaGdnChunked,
                         testing::Values(Backend::GdnShape{16, 32, 128, 128},
                                         Backend::GdnShape{2, 4, 48, 80},
                                         Backend::GdnShape{1, 3, 64, 96}),
                         [](const testing::TestParamInfo<Backend::GdnShape>& i) {
                           const Backend::GdnShape& g = i.param;
                           return std::to_string(g.key_heads) + "x" +
                                  std::to_string(g.value_heads) + "Heads" +
                                  std::to_string(g.key_dim) + "x" + std::to_string(g.value_dim);
                         });

TEST_P(CudaGdnChunked, FormMatchesTheCpusChunkedForm) {
  // 200 tokens from 37 (27 before two chunks, 45 after), 130 from 0 (two chunks, 2 after), 70
  // from 64 (one chunk, 6 after), 40 from 3 (no chunk), 100 from 0 with a snapshot (none), 2150
  // from 10 (54 before 32 chunks, 48 after): 37 chunks, more than one window of the prepare
  // pass (32), the last sequence's in both.
  const Prefill pf{{200, 130, 70, 40, 100, 2150}, {37, 0, 64, 3, 0, 10}};
  const int64_t S = static_cast<int64_t>(pf.n.size()), slots = S + 1;
  std::vector<int32_t> seq_start = {0}, positions, snaps, slot_of(S);
  for (int64_t i = 0; i < S; ++i) {
    for (int32_t j = 0; j < pf.n[i]; ++j) positions.push_back(pf.p0[i] + j);
    seq_start.push_back(seq_start.back() + pf.n[i]);
    slot_of[i] = static_cast<int32_t>(i);
  }
  const int64_t T = seq_start.back();
  snaps.assign(T, -1);
  snaps[seq_start[4] + 70] = static_cast<int32_t>(S);  // sequence 4's state after 71 tokens

  const Backend::GdnShape g = GetParam();
  const int64_t C = 2 * g.key_heads * g.key_dim + g.value_heads * g.value_dim,
                V = g.value_heads * g.value_dim,
                per_slot = g.value_heads * g.key_dim * g.value_dim;
  const std::vector<float> qkv = randn(T * C, 51), b = randn(T * g.value_heads, 52),
                           a = randn(T * g.value_heads, 53), A_log = randn(g.value_heads, 54),
                           dt = randn(g.value_heads, 55),
                           states0 = randn(slots * per_slot, 56, 0.1f);
  auto layout_on = [&](bool device, GdnMode mode) {
    BatchLayout l;
    l.num_tokens = T;
    l.num_seqs = S;
    l.gdn_mode = mode;
    l.positions = ints(positions, device);
    l.seq_start = ints(seq_start, device);
    l.state_slot = ints(slot_of, device);
    l.snapshot_slot = ints(snaps, device);
    return l;
  };
  const Tensor qd = upload(qkv.data(), DType::f32, {T, C}),
               bd = upload(b.data(), DType::f32, {T, g.value_heads}),
               ad = upload(a.data(), DType::f32, {T, g.value_heads}),
               Ad = upload(A_log.data(), DType::f32, {g.value_heads}),
               dd = upload(dt.data(), DType::f32, {g.value_heads});
  // The GPU's output followed by every state slot.
  auto run_gpu = [&](GdnMode mode, const char* chunked) {
    ScopedEnv knob("HIBANA_CUDA_GDN_CHUNKED", chunked);
    Tensor out = device_f32(T, V), st = upload(states0.data(), DType::f32,
                                               {slots, g.value_heads, g.key_dim, g.value_dim});
    gpu->gdn_recurrence(qd, bd, ad, Ad, dd, g, st, layout_on(true, mode), out);
    std::vector<float> r = download(out), s = download(st);
    r.insert(r.end(), s.begin(), s.end());
    return r;
  };
  auto run_cpu = [&](GdnMode mode) {
    std::vector<float> q1 = qkv, b1 = b, a1 = a, A1 = A_log, dt1 = dt, st = states0, r(T * V);
    cpu->gdn_recurrence(
        Tensor(q1.data(), DType::f32, {T, C}), Tensor(b1.data(), DType::f32, {T, g.value_heads}),
        Tensor(a1.data(), DType::f32, {T, g.value_heads}),
        Tensor(A1.data(), DType::f32, {g.value_heads}),
        Tensor(dt1.data(), DType::f32, {g.value_heads}), g,
        Tensor(st.data(), DType::f32, {slots, g.value_heads, g.key_dim, g.value_dim}),
        layout_on(false, mode), Tensor(r.data(), DType::f32, {T, V}));
    r.insert(r.end(), st.begin(), st.end());
    return r;
  };
  const std::vector<float> chunked = run_gpu(GdnMode::aligned_chunks, "1"),
                           cpu_chunked = run_cpu(GdnMode::aligned_chunks),
                           recurrent = run_gpu(GdnMode::aligned_chunks, "0"),
                           exact = run_gpu(GdnMode::recurrent, "1");
  // A layout asking for the recurrent form gets it, switch or not; so does a GPU with the 99
  // KiB a block of DGX Spark's GB10 (and sm_86/89/120), where the sequential kernel's 138 KiB
  // do not fit — here by the limit, there always.
  EXPECT_EQ(exact, recurrent);
  {
    ScopedEnv small("HIBANA_CUDA_SMEM_LIMIT", "101376");
    EXPECT_EQ(run_gpu(GdnMode::aligned_chunks, "1"), recurrent);
  }
  // The CPU's chunked form, to rounding (the recurrent form too: the CPU's two forms are 4e-7
  // apart here).
  EXPECT_LT(max_abs_diff(chunked, cpu_chunked), 1e-4f);
  if (cuda_shared_memory_per_block() <= 101376) return;  // such a GPU: checked above
  // Elsewhere the chunks ran: the recurrent form differs, but little.
  const float apart = max_abs_diff(chunked, recurrent);
  EXPECT_GT(apart, 0.0f) << "the chunked form did not run";
  EXPECT_LT(apart, 1e-4f);
  // Sequences 3 (no whole chunk) and 4 (a snapshot) are the recurrent kernel's alone: their
  // outputs, final states and the snapshot have its bits.
  auto same_rows = [&](int64_t t0, int64_t t1) {
    return std::equal(chunked.begin() + t0 * V, chunked.begin() + t1 * V,
                      recurrent.begin() + t0 * V);
  };
  EXPECT_TRUE(same_rows(seq_start[3], seq_start[5]));
  for (int64_t slot : {int64_t{3}, int64_t{4}, S}) {
    const int64_t at = T * V + slot * per_slot;
    EXPECT_TRUE(
        std::equal(chunked.begin() + at, chunked.begin() + at + per_slot, recurrent.begin() + at))
        << "slot " << slot;
  }
  // Sequence 0's 27 tokens before its chunks too; its chunk tokens are the chunked kernel's.
  EXPECT_TRUE(same_rows(0, 27));
  EXPECT_FALSE(same_rows(27, 27 + 128));
}

// The conv over a prefill's tokens in parallel (the default where sequences average 32 tokens)
// against the kernel walking each sequence
// (HIBANA_CUDA_CONV_TOKENS=0): the same bits for the outputs, the carried states and a snapshot
// — sequences shorter than the window (the state reaches past them), a padding row (slot -1),
// runs of 8 tokens crossing sequence boundaries — and, to rounding, the CPU's.
TEST_F(CudaGdn, ConvOverTokensHasTheBitsOfTheWalk) {
  // Sequence lengths: 1 and 2 (below the window of 3), 200, 5, 77 (a padding row), 3, 100.
  const std::vector<int32_t> n = {1, 2, 200, 5, 77, 3, 100};
  const int64_t S = static_cast<int64_t>(n.size()), slots = S + 2;
  std::vector<int32_t> seq_start = {0}, slot_of(S);
  for (int64_t i = 0; i < S; ++i) {
    seq_start.push_back(seq_start.back() + n[i]);
    slot_of[i] = static_cast<int32_t>(S - 1 - i);  // slots not in sequence order
  }
  slot_of[4] = -1;
  const int64_t T = seq_start.back();
  std::vector<int32_t> snaps(T, -1);
  snaps[seq_start[2] + 130] = static_cast<int32_t>(S);    // mid-sequence
  snaps[seq_start[3] + 1] = static_cast<int32_t>(S + 1);  // inside the window's reach
  ASSERT_GE(T, 32 * S) << "the pass must take the token-parallel kernel";
  for (const int64_t K : {int64_t{4}, int64_t{2}, int64_t{9}}) {
    SCOPED_TRACE(testing::Message() << "kernel " << K);
    const int64_t C = 200, W = K - 1;  // C: channels off a multiple of the block
    const int64_t pitch = C + 24;      // x a column range of a wider buffer, as in the layer
    const std::vector<float> xw = randn(T * pitch, 61), w = randn(C * K, 62),
                             states0 = randn(slots * C * W, 63);
    std::vector<float> x(T * C);
    for (int64_t t = 0; t < T; ++t) std::copy_n(xw.begin() + t * pitch, C, x.begin() + t * C);
    const BatchLayout l = recurrent_layout(T, seq_start, slot_of, snaps, true);
    const Tensor xd = first_columns(upload(xw.data(), DType::f32, {T, pitch}), C),
                 wd = upload(w.data(), DType::f32, {C, K});
    auto run = [&](const char* by_tokens) {
      ScopedEnv knob("HIBANA_CUDA_CONV_TOKENS", by_tokens);
      Tensor out = device_f32(T, C, 1e30f),  // (every output must be written)
          st = upload(states0.data(), DType::f32, {slots, C, W});
      gpu->gdn_conv(xd, wd, st, l, out);
      std::vector<float> r = download(out), s = download(st);
      r.insert(r.end(), s.begin(), s.end());
      return r;
    };
    const std::vector<float> tokens = run("1"), walk = run("0");
    EXPECT_EQ(tokens, walk);
    for (int64_t t = seq_start[4]; t < seq_start[5]; ++t) {
      EXPECT_EQ(tokens[t * C + C - 1], 0.0f) << "padding row, token " << t;
    }
    // The CPU has no padding rows: sequence 4 gets a slot of its own there (its outputs and
    // that slot are not compared).
    std::vector<int32_t> cpu_slots = slot_of;
    cpu_slots[4] = static_cast<int32_t>(S - 1 - 4);
    const BatchLayout lc = recurrent_layout(T, seq_start, cpu_slots, snaps, false);
    std::vector<float> x1 = x, w1 = w, st = states0, r(T * C);
    cpu->gdn_conv(Tensor(x1.data(), DType::f32, {T, C}), Tensor(w1.data(), DType::f32, {C, K}),
                  Tensor(st.data(), DType::f32, {slots, C, W}), lc,
                  Tensor(r.data(), DType::f32, {T, C}));
    r.insert(r.end(), st.begin(), st.end());
    std::vector<float> mine = tokens;
    for (int64_t t = seq_start[4]; t < seq_start[5]; ++t) {
      std::fill_n(mine.begin() + t * C, C, 0.0f);
      std::fill_n(r.begin() + t * C, C, 0.0f);
    }
    const int64_t slot4 = T * C + (S - 1 - 4) * C * W;
    std::fill_n(mine.begin() + slot4, C * W, 0.0f);
    std::fill_n(r.begin() + slot4, C * W, 0.0f);
    EXPECT_LT(max_abs_diff(mine, r), 1e-5f);
  }
}

}  // namespace
}  // namespace hibana
