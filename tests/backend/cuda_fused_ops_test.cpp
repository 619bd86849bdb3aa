// CUDA ops that fuse several Backend ops (attention_prep) give the bits of the ops they
// replace, run one by one on the same GPU, and match the CPU. Skipped without a GPU.
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
#include "support/cuda_fixture.h"
#include "support/random.h"

namespace hibana {
namespace {

using test::randn;

class CudaFusedOps : public test::CudaFixture {
 public:
  // Columns [0, width) of a row-major f32 tensor: a view with the wider row pitch.
  static Tensor first_columns(const Tensor& t, int64_t width) {
    Tensor v = t;
    v.shape[1] = width;
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
    for (auto [name, x, y] : {std::tuple<const char*, Tensor, Tensor>{"q", fused.proj, parts.proj},
                              {"k", fused.k, parts.k},
                              {"k pages", fused.kp, parts.kp},
                              {"v pages", fused.vp, parts.vp}}) {
      const std::vector<float> got = download(x), want = download(y);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << name;
    }

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

}  // namespace
}  // namespace hibana
