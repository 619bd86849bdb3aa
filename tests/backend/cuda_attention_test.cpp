// CUDA attention against the CPU backend: over several KV splits and more splits than the merge
// kernel takes per round trip, at head_dims with and without a compiled variant, and the promise
// that a token's output has the same bits whichever kernel served it (decoded alone, in a
// prefill chunk, with fewer K/V tiles in flight, with shorter splits), and the output gate
// applied in the merge; whole prefill blocks and the other rows on tensor cores beside them.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <tuple>

#include "backend/backend.h"
#include "core/device_memory.h"
#include "support/cuda_fixture.h"
#include "support/random.h"
#include "support/scoped_env.h"

namespace hibana {
namespace {

using test::randn;

class CudaAttention : public test::CudaFixture {
 public:
  // The f32 kernels' tests: rows outside prefill blocks take them, not the tensor cores (the
  // default; RowsOutsidePrefillBlocksOnTensorCores turns those on).
  test::ScopedEnv f32_rows{"HIBANA_CUDA_MMA_DECODE", "0"};

  static bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  }

  // Sequences of the given lengths on pages handed out from the top down (each table row padded
  // with page 0), their tokens at positions 0, 1, ... in order.
  struct Sequences {
    int64_t page, max_pages = 0, pages = 0;
    std::vector<int64_t> lens;
    std::vector<int32_t> start{0}, table;  // table: [sequences][max_pages]
    Sequences(std::vector<int64_t> lengths, int64_t page_size)
        : page(page_size), lens(std::move(lengths)) {
      for (int64_t n : lens) {
        max_pages = std::max(max_pages, (n + page - 1) / page);
        pages += (n + page - 1) / page;
        start.push_back(static_cast<int32_t>(start.back() + n));
      }
      table.assign(lens.size() * max_pages, 0);
      int32_t next = static_cast<int32_t>(pages);
      for (size_t s = 0; s < lens.size(); ++s) {
        for (int64_t p = 0; p < (lens[s] + page - 1) / page; ++p) table[s * max_pages + p] = --next;
      }
    }
    int64_t tokens() const { return start.back(); }
  };
  // A pass of token ranges {sequence, first token, count} of b, each range a sequence of the
  // pass: on the device, or for the CPU backend over vectors the fixture keeps.
  using Range = std::array<int64_t, 3>;
  BatchLayout layout_of(const Sequences& b, bool device, const std::vector<Range>& ranges) {
    std::vector<int32_t> pos, seq, st{0}, table, slot, state, snap;
    for (size_t r = 0; r < ranges.size(); ++r) {
      const auto [s, t0, n] = ranges[r];
      for (int64_t i = t0; i < t0 + n; ++i) {
        pos.push_back(static_cast<int32_t>(i));
        seq.push_back(static_cast<int32_t>(r));
        slot.push_back(static_cast<int32_t>(b.table[s * b.max_pages + i / b.page] * b.page +
                                            i % b.page));
        snap.push_back(-1);
      }
      st.push_back(static_cast<int32_t>(pos.size()));
      table.insert(table.end(), b.table.begin() + s * b.max_pages,
                   b.table.begin() + (s + 1) * b.max_pages);
      state.push_back(-1);
    }
    auto make = [&](std::vector<int32_t>& v) {
      const int64_t len = static_cast<int64_t>(v.size());
      if (device) return upload(v.data(), DType::i32, {len});
      kept_.push_back(std::move(v));
      return Tensor(kept_.back().data(), DType::i32, {len});
    };
    BatchLayout l;
    l.num_tokens = static_cast<int64_t>(pos.size());
    l.num_seqs = static_cast<int64_t>(ranges.size());
    l.page_size = b.page;
    l.max_pages = b.max_pages;
    l.positions = make(pos);
    l.token_seq = make(seq);
    l.seq_start = make(st);
    l.page_table = make(table);
    l.kv_slot = make(slot);
    l.state_slot = make(state);
    l.snapshot_slot = make(snap);
    return l;
  }
  // Tokens [t0, t0 + n) of b's first sequence as a pass.
  BatchLayout layout_of(const Sequences& b, bool device, int64_t t0, int64_t n) {
    return layout_of(b, device, {{0, t0, n}});
  }
  // Every token of b, a sequence a range.
  static std::vector<Range> whole(const Sequences& b) {
    std::vector<Range> r;
    for (size_t s = 0; s < b.lens.size(); ++s) r.push_back({static_cast<int64_t>(s), 0, b.lens[s]});
    return r;
  }
  // The rows of x ([b's tokens, width]) that the ranges name, in their order.
  static std::vector<float> gather(const Sequences& b, const std::vector<float>& x, int64_t width,
                                   const std::vector<Range>& ranges) {
    std::vector<float> r;
    for (const auto& [s, t0, n] : ranges) {
      const int64_t first = b.start[s] + t0;
      r.insert(r.end(), x.begin() + first * width, x.begin() + (first + n) * width);
    }
    return r;
  }

  // Attention over a whole batch (host and device layouts of the same tokens) on the CPU, the
  // reference, and on the GPU, from random q/k/v seeded from `seed`: the GPU's outputs must be
  // within 1e-5 of the CPU's; its inputs stay for single-token comparisons.
  struct AttentionBatch {
    Tensor qd, kd, vd;  // q rows, K and V pages
    std::vector<float> q, k, v, got;  // q, k and v rows (host), the GPU's outputs
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
    b.q = std::move(q);
    b.k = std::move(k);
    b.v = std::move(v);
    return b;
  }
  // The GPU's attention over pass `l` (queries q, all's K and V pages) with `rows` set as the
  // pass's prefill rows (cleared after), gated where `gate` is given: the outputs.
  std::vector<float> attend_with_blocks(const Tensor& q, int64_t heads, const AttentionBatch& all,
                                        const BatchLayout& l,
                                        std::vector<Backend::RowRange> rows,
                                        const Tensor* gate = nullptr) {
    Tensor out = device_f32(l.num_tokens, q.shape[1]);
    gpu->set_prefill_rows(l.num_tokens, std::move(rows));
    if (gate) {
      gpu->attention_gated(q, heads, all.kd, all.vd, 0.125f, l, *gate, out);
    } else {
      gpu->attention(q, heads, all.kd, all.vd, 0.125f, l, out);
    }
    gpu->set_prefill_rows(0, {});
    return download(out);
  }
  // Rows [r0, r1) of x ([rows, width]).
  static std::vector<float> rows_of(const std::vector<float>& x, int64_t width, int64_t r0,
                                    int64_t r1) {
    return std::vector<float>(x.begin() + r0 * width, x.begin() + r1 * width);
  }
  // Returns the last token's output.
  std::vector<float> check_one_sequence(int64_t heads, int64_t kvh, int64_t hd);
  void check_token_blocks(int64_t heads, int64_t kvh, int64_t hd);

 private:
  std::deque<std::vector<int32_t>> kept_;  // host layouts' arrays
};

// A 600-token prefill (5 splits of keys) matches the CPU, and its last token decoded alone
// gives the same bits: head_dim 64 (the prefill takes the tiled kernel, the decode the
// per-token kernel's variant for 64) and 100 (no variant: the run-time head_dim kernel).
TEST_F(CudaAttention, AttentionOverSeveralSplitsMatchesCpuAndDecodeMatchesPrefill) {
  for (const int64_t hd : {int64_t{64}, int64_t{100}}) {
    SCOPED_TRACE("head_dim " + std::to_string(hd));
    check_one_sequence(4, 2, hd);
  }
}

std::vector<float> CudaAttention::check_one_sequence(int64_t heads, int64_t kvh, int64_t hd) {
  const int64_t T = 600;
  const Sequences s({T}, 64);
  const AttentionBatch all = attention_batch(heads, kvh, hd, s.pages, s.page, 1,
                                             layout_of(s, false, 0, T), layout_of(s, true, 0, T));
  // The last token on its own (a decode step) gives the same bits as inside the prefill.
  Tensor last = device_f32(1, heads * hd);
  gpu->attention(all.qd.slice_rows(T - 1, T), heads, all.kd, all.vd, 0.125f,
                 layout_of(s, true, T - 1, 1), last);
  const std::vector<float> alone = download(last);
  EXPECT_TRUE(same_bits(alone, std::vector<float>(all.got.end() - heads * hd, all.got.end())));
  return alone;
}

// A decode token's output does not depend on how many K/V tiles the per-token kernel keeps in
// flight (HIBANA_CUDA_ATTENTION_STAGES: 3, the default here, 2, and 1, which runs the run-time
// head_dim kernel) nor on how many query heads a warp takes (HIBANA_CUDA_ATTENTION_HEADS_PER_WARP
// 2: one warp scores and adds two heads from each K and V row, the default for groups of 8 or
// more; 1: one): Qwen3-8B's heads (group 4, head_dim 128), Qwen3-Next's (8, 256) and a group of
// 2 at 64.
TEST_F(CudaAttention, AttentionStagesAndHeadsPerWarpKeepTheBits) {
  for (auto [heads, kvh, hd] :
       {std::tuple<int64_t, int64_t, int64_t>{8, 2, 128}, {16, 2, 256}, {4, 2, 64}}) {
    SCOPED_TRACE("head_dim " + std::to_string(hd));
    const int64_t T = 300;
    const Sequences s({T}, 16);
    const AttentionBatch all = attention_batch(heads, kvh, hd, s.pages, s.page, 3,
                                               layout_of(s, false, 0, T), layout_of(s, true, 0, T));
    auto decode = [&](int64_t t) {
      Tensor out = device_f32(1, heads * hd);
      gpu->attention(all.qd.slice_rows(t, t + 1), heads, all.kd, all.vd, 0.125f,
                     layout_of(s, true, t, 1), out);
      return download(out);
    };
    // The last token with the knobs set (restored after). Another token is decoded first: its
    // split partials fill the scratch this decode is likely to get, so a kernel that leaves
    // part of its partials unwritten gives other bits, not the previous decode's.
    auto decode_last = [&](const char* stages, const char* per_warp = nullptr) {
      decode(T - 2);
      test::ScopedEnv env("HIBANA_CUDA_ATTENTION_STAGES", stages);
      test::ScopedEnv heads_env("HIBANA_CUDA_ATTENTION_HEADS_PER_WARP", per_warp);
      return decode(T - 1);
    };
    const std::vector<float> base = decode_last(nullptr, "1");
    EXPECT_TRUE(same_bits(base, std::vector<float>(all.got.end() - heads * hd, all.got.end())));
    EXPECT_TRUE(same_bits(decode_last("2"), base)) << "2 stages";
    EXPECT_TRUE(same_bits(decode_last("1"), base)) << "1 stage";
    EXPECT_TRUE(same_bits(decode_last(nullptr, "2"), base)) << "2 heads a warp";
    EXPECT_TRUE(same_bits(decode_last("2", "2"), base)) << "2 stages, 2 heads a warp";
  }
}

// Shorter splits (HIBANA_CUDA_ATTENTION_SPLIT 64 and 32, a benchmark knob): a 600-token prefill
// still matches the CPU and its last token decoded alone has the prefill's bits — every kernel
// (per-token, tiled, merge) splits alike — and those bits differ from the 128-position splits'
// (the softmax is merged from other pieces: the knob took effect). Qwen3-8B's heads (group 4,
// head_dim 128), Qwen3-Next's (8, 256) and head_dim 64 take the tiled kernel in prefill; 100 the
// run-time head_dim kernel for both. With 32, the token blocks of three sequences too, and a
// value the kernels do not have is refused.
TEST_F(CudaAttention, ShorterSplitsKeepDecodeAndPrefillTogether) {
  for (auto [heads, kvh, hd] :
       {std::tuple<int64_t, int64_t, int64_t>{8, 2, 128}, {16, 2, 256}, {4, 2, 64}, {4, 2, 100}}) {
    SCOPED_TRACE("head_dim " + std::to_string(hd));
    std::vector<float> base;
    {
      test::ScopedEnv unset("HIBANA_CUDA_ATTENTION_SPLIT", nullptr);
      base = check_one_sequence(heads, kvh, hd);
    }
    for (const char* split : {"64", "32"}) {
      SCOPED_TRACE(std::string("split ") + split);
      test::ScopedEnv env("HIBANA_CUDA_ATTENTION_SPLIT", split);
      EXPECT_FALSE(same_bits(check_one_sequence(heads, kvh, hd), base));
    }
  }
  test::ScopedEnv env("HIBANA_CUDA_ATTENTION_SPLIT", "32");
  check_token_blocks(8, 2, 128);
  check_token_blocks(16, 2, 256);
  test::ScopedEnv odd("HIBANA_CUDA_ATTENTION_SPLIT", "48");
  EXPECT_THROW(check_one_sequence(4, 2, 64), Error);
}

// A gated attention's output gate applied by the merge kernel (HIBANA_CUDA_FUSED_ATTENTION_GATE=1):
// the bits of attention then mul_sigmoid, for a 600-token prefill (the tiled kernel at head_dim
// 64, the per-token one at 100) and its last token decoded alone; the gate a column range of a
// wider buffer, as in the layers; and the ungated output (checked against the CPU) times the
// gate computed here. A backend with its op timer on shows mul_sigmoid gone.
TEST_F(CudaAttention, OutputGateInTheMergeHasTheBitsOfAttentionThenTheGate) {
  test::ScopedEnv timing("HIBANA_CUDA_TIMING", "1");
  const std::unique_ptr<Backend> timed = make_cuda_backend();  // (its timer reads it now)
  const int64_t T = 600;
  for (auto [heads, kvh, hd] :
       {std::tuple<int64_t, int64_t, int64_t>{16, 2, 256}, {4, 2, 64}, {4, 2, 100}}) {
    SCOPED_TRACE("head_dim " + std::to_string(hd));
    const Sequences s({T}, 64);
    const BatchLayout host = layout_of(s, false, 0, T), dev = layout_of(s, true, 0, T);
    const AttentionBatch b = attention_batch(heads, kvh, hd, s.pages, s.page, 5, host, dev);
    const int64_t W = heads * hd;
    std::vector<float> wide = randn(T * 2 * W, 9);  // [other | gate] per row
    Tensor gate = upload(wide.data(), DType::f32, {T, 2 * W});
    gate.data = static_cast<float*>(gate.data) + W;
    gate.shape[1] = W;
    for (auto [t0, n] : {std::pair<int64_t, int64_t>{0, T}, {T - 1, 1}}) {
      SCOPED_TRACE(testing::Message() << n << " tokens");
      const BatchLayout l = n == T ? dev : layout_of(s, true, t0, n);
      const Tensor q = b.qd.slice_rows(t0, t0 + n), g = gate.slice_rows(t0, t0 + n);
      Tensor apart = device_f32(n, W), fused = device_f32(n, W);
      timed->timing_report();  // (forgets the ops before)
      timed->Backend::attention_gated(q, heads, b.kd, b.vd, 0.125f, l, g, apart);
      EXPECT_NE(timed->timing_report().find("mul_sigmoid"), std::string::npos);
      {
        test::ScopedEnv on("HIBANA_CUDA_FUSED_ATTENTION_GATE", "1");
        timed->attention_gated(q, heads, b.kd, b.vd, 0.125f, l, g, fused);
        const std::string ops = timed->timing_report();
        EXPECT_EQ(ops.find("mul_sigmoid"), std::string::npos) << ops;
        EXPECT_NE(ops.find("attention_gated"), std::string::npos) << ops;
      }
      const std::vector<float> a = download(apart), f = download(fused);
      EXPECT_TRUE(same_bits(a, f));
      std::vector<float> ref(b.got.begin() + t0 * W, b.got.begin() + (t0 + n) * W);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < W; ++i) {
          const float gv = wide[(t0 + t) * 2 * W + W + i];
          ref[t * W + i] *= 1.0f / (1.0f + std::exp(-gv));
        }
      }
      EXPECT_LT(max_abs_diff(f, ref), 1e-5f);
    }
  }
}

// A token at position 8400 has 66 splits, more than the merge kernel loads per round trip (32):
// the maximum is taken over all of them first. The keys of the last split score far above the
// others (the largest maximum is in the last chunk of splits; a maximum taken over the first
// chunk alone would overflow the last's scales to infinity), and the output matches the CPU.
TEST_F(CudaAttention, AttentionOverMoreSplitsThanOneMergeChunkMatchesCpu) {
  const int64_t T = 8401, heads = 2, kvh = 1, hd = 64;
  const Sequences s({T}, 64);
  auto q = randn(heads * hd, 31), k = randn(T * kvh * hd, 32), v = randn(T * kvh * hd, 33);
  std::copy(q.begin(), q.begin() + hd, q.begin() + hd);  // both heads ask the same
  for (int64_t t = 8320; t < T; ++t) {
    for (int64_t d = 0; d < hd; ++d)
      k[t * hd + d] = 30.0f * q[d];  // (equal scores: a uniform average)
  }
  std::vector<float> kp(s.pages * kvh * s.page * hd), vp(kp.size()), ref(heads * hd);
  Tensor kpt(kp.data(), DType::f32, {s.pages, kvh, s.page, hd}),
      vpt(vp.data(), DType::f32, {s.pages, kvh, s.page, hd});
  cpu->store_kv(Tensor(k.data(), DType::f32, {T, kvh * hd}),
                Tensor(v.data(), DType::f32, {T, kvh * hd}), kpt, vpt, layout_of(s, false, 0, T));
  cpu->attention(Tensor(q.data(), DType::f32, {1, heads * hd}), heads, kpt, vpt, 0.125f,
                 layout_of(s, false, T - 1, 1), Tensor(ref.data(), DType::f32, {1, heads * hd}));
  Tensor kd = upload(kp.data(), DType::f32, {s.pages, kvh, s.page, hd});
  Tensor vd = upload(vp.data(), DType::f32, {s.pages, kvh, s.page, hd});
  Tensor out = device_f32(1, heads * hd);
  gpu->attention(upload(q.data(), DType::f32, {1, heads * hd}), heads, kd, vd, 0.125f,
                 layout_of(s, true, T - 1, 1), out);
  const std::vector<float> got = download(out);
  for (float x : got) ASSERT_TRUE(std::isfinite(x));
  EXPECT_LT(max_abs_diff(got, ref), 1e-5f);
}

// Prefill launches take blocks of consecutive tokens of one sequence per CTA (the register-tiled
// kernel). Three sequences in one launch (13, 1 and 300 tokens: blocks end inside each) match
// the CPU, and every token gives the same bits as when it is decoded alone (the per-token
// kernel) or prefilled in a chunk that starts elsewhere.
TEST_F(CudaAttention, AttentionTokenBlocksMatchCpuAndEachTokenAlone) {
  // Qwen3-8B's heads (group 4, head_dim 128: 32 tokens per block) and Qwen3-Next's (group 8,
  // head_dim 256: 8 tokens per block).
  for (auto [heads, kvh, hd] : {std::tuple<int64_t, int64_t, int64_t>{8, 2, 128}, {16, 2, 256}}) {
    SCOPED_TRACE("heads " + std::to_string(heads) + ", head_dim " + std::to_string(hd));
    check_token_blocks(heads, kvh, hd);
  }
}

void CudaAttention::check_token_blocks(int64_t heads, int64_t kvh, int64_t hd) {
  const Sequences b({13, 1, 300}, 16);
  const AttentionBatch all =
      attention_batch(heads, kvh, hd, b.pages, b.page, 21, layout_of(b, false, whole(b)),
                      layout_of(b, true, whole(b)));
  const int64_t row = heads * hd;
  auto same_as_batch = [&](int64_t s, int64_t t0, int64_t n) {
    Tensor part = device_f32(n, row);
    const int64_t first = b.start[s] + t0;
    gpu->attention(all.qd.slice_rows(first, first + n), heads, all.kd, all.vd, 0.125f,
                   layout_of(b, true, {{s, t0, n}}), part);
    return same_bits(download(part), gather(b, all.got, row, {{s, t0, n}}));
  };
  for (int64_t s = 0; s < static_cast<int64_t>(b.lens.size()); ++s) {
    for (int64_t t = 0; t < b.lens[s]; t += (t % 7 == 0 ? 1 : 5))
      EXPECT_TRUE(same_as_batch(s, t, 1)) << "sequence " << s << " token " << t << " alone";
  }
  EXPECT_TRUE(same_as_batch(2, 101, 150)) << "a chunk of the long sequence";
}

// Whole prefill blocks on tensor cores (attention_mma.cu: HIBANA_CUDA_MMA_ATTENTION 1, one bf16
// term of each operand, and 3, two): Qwen3-8B's heads (group 4, head_dim 128), Qwen3-Next's (8,
// 256) and a group of 2 at 64. Two sequences (300 and 200 tokens) in one pass whose prefill rows
// are [64, 256) of the first and [364, 492), the second's positions [64, 192): those rows
// within bf16's rounding of the split kernels' outputs (which are within 1e-5 of the CPU's), and
// not their bits; the other rows exactly their bits; the same rows' bits again in a pass of the
// first sequence's tokens [128, 300) alone (its prefill rows [0, 128)); the output gate. With the
// switch off (=0) every row has the split kernels' bits.
TEST_F(CudaAttention, PrefillBlocksOnTensorCores) {
  for (auto [heads, kvh, hd] :
       {std::tuple<int64_t, int64_t, int64_t>{8, 2, 128}, {16, 2, 256}, {4, 2, 64}}) {
    SCOPED_TRACE("heads " + std::to_string(heads) + ", head_dim " + std::to_string(hd));
    const Sequences s({300, 200}, 16);
    const BatchLayout dev = layout_of(s, true, whole(s));
    const AttentionBatch all =
        attention_batch(heads, kvh, hd, s.pages, s.page, 41, layout_of(s, false, whole(s)), dev);
    const int64_t T = s.tokens(), W = heads * hd;
    const std::vector<Backend::RowRange> blocks{{64, 256}, {364, 492}};
    auto rows = [W](const std::vector<float>& x, int64_t b, int64_t e) {
      return rows_of(x, W, b, e);
    };
    auto run = [&](const Tensor& q, const BatchLayout& l, std::vector<Backend::RowRange> ranges,
                   const Tensor* gate = nullptr) {
      return attend_with_blocks(q, heads, all, l, std::move(ranges), gate);
    };
    {
      test::ScopedEnv off("HIBANA_CUDA_MMA_ATTENTION", "0");
      EXPECT_TRUE(same_bits(run(all.qd, dev, blocks), all.got)) << "switch off";
    }
    // This GPU's shared memory, then a GB10's (99 KiB): a variant that does not fit leaves
    // every row to the split kernels.
    for (auto [terms, limit] : {std::pair<const char*, const char*>{"1", nullptr},
                                {"3", nullptr}, {"1", "101376"}, {"3", "101376"}}) {
      SCOPED_TRACE(std::string("terms ") + terms + ", limit " + (limit ? limit : "none"));
      test::ScopedEnv on("HIBANA_CUDA_MMA_ATTENTION", terms);
      test::ScopedEnv small("HIBANA_CUDA_SMEM_LIMIT", limit);
      const bool taken = cuda_attention_on_tensor_cores(hd, heads / kvh, terms[0] - '0');
      if (!limit && cuda_shared_memory_per_block() >= 227 * 1024) {
        EXPECT_TRUE(taken) << "sm_90";
      }
      const std::vector<float> got = run(all.qd, dev, blocks);
      for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 64}, {256, 364}, {492, T}})
        EXPECT_TRUE(same_bits(rows(got, b, e), rows(all.got, b, e))) << "rows " << b;
      const float bound = terms[0] == '1' ? 3e-2f : 2e-4f;
      for (const Backend::RowRange& r : blocks) {
        const std::vector<float> mine = rows(got, r.begin, r.end);
        const std::vector<float> split = rows(all.got, r.begin, r.end);
        EXPECT_EQ(same_bits(mine, split), !taken) << "rows " << r.begin << ", taken " << taken;
        const float diff = max_abs_diff(mine, split);
        EXPECT_LT(diff, bound) << "rows " << r.begin;
        std::printf("[ mma attention ] terms %s, head_dim %ld, rows %ld%s: max |diff| %.3g\n",
                    terms, static_cast<long>(hd), static_cast<long>(r.begin),
                    taken ? "" : " (does not fit: split kernels)", diff);
      }
      const std::vector<float> alone = run(all.qd.slice_rows(128, 300),
                                           layout_of(s, true, {{0, 128, 172}}), {{0, 128}});
      EXPECT_TRUE(same_bits(rows(alone, 0, 128), rows(got, 128, 256))) << "another pass";
      const std::vector<float> g = randn(T * W, 43);
      const Tensor gd = upload(g.data(), DType::f32, {T, W});
      for (const char* fused : {"0", "1"}) {
        test::ScopedEnv gate_env("HIBANA_CUDA_FUSED_ATTENTION_GATE", fused);
        const std::vector<float> gated = run(all.qd, dev, blocks, &gd);
        std::vector<float> want = got;
        for (size_t i = 0; i < want.size(); ++i) want[i] *= 1.0f / (1.0f + std::exp(-g[i]));
        EXPECT_LT(max_abs_diff(gated, want), 1e-5f) << "gate, fused " << fused;
      }
    }
  }
}

// Rows outside whole prefill blocks on tensor cores (attention_decode.cu, HIBANA_CUDA_MMA_DECODE,
// on by default where HIBANA_CUDA_MMA_ATTENTION is 1): Qwen3-8B's heads (group 4, head_dim 128),
// Qwen3-Next's (8, 256) and a group of 2 at 64, in 128-, 64- and 32-position splits. Three
// sequences (13, 1 and 300 tokens) in one pass: every row within bf16's rounding of the f32
// kernels' (which are within 1e-5 of the CPU's) and, where the kernel fits, not their bits; each
// token decoded alone and a chunk of the long sequence with the pass's bits, and the same rows
// beside whole prefill blocks (also with the output gate in the merge). A head_dim the kernel
// has no variant for (100), a pass in recurrent mode, a group no prefill-block kernel takes (6)
// and HIBANA_CUDA_MMA_ATTENTION=0 keep the f32 kernels' bits.
TEST_F(CudaAttention, RowsOutsidePrefillBlocksOnTensorCores) {
  for (auto [heads, kvh, hd] : {std::tuple<int64_t, int64_t, int64_t>{8, 2, 128},
                                {16, 2, 256}, {4, 2, 64}, {4, 2, 100}}) {
    for (const char* split : {"128", "64", "32"}) {
      SCOPED_TRACE("head_dim " + std::to_string(hd) + ", split " + split);
      test::ScopedEnv split_env("HIBANA_CUDA_ATTENTION_SPLIT", split);
      const Sequences b({13, 1, 300}, 16);
      const AttentionBatch all =
          attention_batch(heads, kvh, hd, b.pages, b.page, 51, layout_of(b, false, whole(b)),
                          layout_of(b, true, whole(b)));
      const int64_t row = heads * hd;
      test::ScopedEnv on("HIBANA_CUDA_MMA_DECODE", "1");
      auto run = [&](const std::vector<Range>& ranges) {
        int64_t n = 0;
        for (const Range& r : ranges) n += r[2];
        Tensor out = device_f32(n, row);
        const int64_t first = b.start[ranges[0][0]] + ranges[0][1];
        const Tensor q = ranges.size() == 1 ? all.qd.slice_rows(first, first + n) : all.qd;
        gpu->attention(q, heads, all.kd, all.vd, 0.125f, layout_of(b, true, ranges), out);
        return download(out);
      };
      const std::vector<float> got = run(whole(b));
      for (float x : got) ASSERT_TRUE(std::isfinite(x));
      const bool taken = hd != 100;
      if (cuda_shared_memory_per_block() >= 227 * 1024) {
        EXPECT_EQ(same_bits(got, all.got), !taken) << "the kernel took the rows";
      }
      const float diff = max_abs_diff(got, all.got);
      EXPECT_LT(diff, 3e-2f);
      std::printf("[ decode mma ] head_dim %ld, split %s: max |diff| %.3g\n",
                  static_cast<long>(hd), split, diff);
      for (int64_t s = 0; s < static_cast<int64_t>(b.lens.size()); ++s) {
        for (int64_t t = 0; t < b.lens[s]; t += (t % 7 == 0 ? 1 : 5)) {
          EXPECT_TRUE(same_bits(run({{s, t, 1}}), gather(b, got, row, {{s, t, 1}})))
              << "sequence " << s << " token " << t << " alone";
        }
      }
      EXPECT_TRUE(same_bits(run({{2, 101, 150}}), gather(b, got, row, {{2, 101, 150}})))
          << "a chunk of the long sequence";
      {
        // Beside whole prefill blocks (the long sequence's positions [0, 256), rows [14, 270) of
        // the pass, on attention_mma.cu's kernel): the other rows keep their bits and the blocks
        // stay within bf16's rounding; with the output gate in the merge, every row is the
        // ungated one times sigmoid(gate).
        const BatchLayout dev = layout_of(b, true, whole(b));
        auto mixed = [&](const Tensor* gate) {
          return attend_with_blocks(all.qd, heads, all, dev, {{14, 270}}, gate);
        };
        auto rows = [row](const std::vector<float>& x, int64_t r0, int64_t r1) {
          return rows_of(x, row, r0, r1);
        };
        const int64_t T = b.tokens();
        const std::vector<float> m = mixed(nullptr);
        EXPECT_TRUE(same_bits(rows(m, 0, 14), rows(got, 0, 14))) << "rows before the blocks";
        EXPECT_TRUE(same_bits(rows(m, 270, T), rows(got, 270, T))) << "rows after them";
        EXPECT_LT(max_abs_diff(rows(m, 14, 270), rows(all.got, 14, 270)), 3e-2f);
        const std::vector<float> g = randn(T * row, 55);
        const Tensor gd = upload(g.data(), DType::f32, {T, row});
        std::vector<float> want = m;
        for (size_t i = 0; i < want.size(); ++i) want[i] *= 1.0f / (1.0f + std::exp(-g[i]));
        EXPECT_LT(max_abs_diff(mixed(&gd), want), 1e-5f) << "output gate";
      }
      {
        // A pass in recurrent mode (exact: any split of a prompt the same bits, so no prefill
        // rows, and no rows on tensor cores: such a pass may be a whole prompt).
        BatchLayout exact = layout_of(b, true, whole(b));
        exact.gdn_mode = GdnMode::recurrent;
        Tensor out = device_f32(b.tokens(), row);
        gpu->attention(all.qd, heads, all.kd, all.vd, 0.125f, exact, out);
        EXPECT_TRUE(same_bits(download(out), all.got)) << "recurrent mode";
      }
      test::ScopedEnv off("HIBANA_CUDA_MMA_ATTENTION", "0");
      EXPECT_TRUE(same_bits(run(whole(b)), all.got)) << "tensor cores off";
    }
  }
  // A group no prefill-block kernel takes (6): the f32 kernels' bits for every row.
  const Sequences b({40}, 16);
  const AttentionBatch all = attention_batch(12, 2, 128, b.pages, b.page, 53,
                                             layout_of(b, false, whole(b)),
                                             layout_of(b, true, whole(b)));
  test::ScopedEnv on("HIBANA_CUDA_MMA_DECODE", "1");
  Tensor out = device_f32(1, 12 * 128);
  gpu->attention(all.qd.slice_rows(39, 40), 12, all.kd, all.vd, 0.125f, layout_of(b, true, 39, 1),
                 out);
  EXPECT_TRUE(same_bits(download(out), gather(b, all.got, 12 * 128, {{0, 39, 1}}))) << "group 6";
}

}  // namespace
}  // namespace hibana
