// The decode matmul (up to 8 rows, matmul_gemv.cu) against the kernels of larger batches: its
// ways of taking the activations (shared in the CTA, per warp, packed), its weight rings and
// its splits in one CTA must all give the bits of the same rows in a batch. Skipped without a
// GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <utility>
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

class CudaDecodeMatmul : public test::CudaFixture {};

// The decode kernel (up to 8 rows) splits the activations once per CTA into shared memory
// where a split's rows fit (here: up to 6 rows of 640 k) and per warp in registers where they
// do not (7 and 8 rows); up to 2 rows it packs their terms into one mma's columns. Every way
// must give the bits of the larger batch's kernel.
void expect_decode_rows_match_batch(CudaDecodeMatmul& t, int64_t N, int64_t K,
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

TEST_F(CudaDecodeMatmul, DecodeMatmulGivesTheSameBitsWithSharedAndPerWarpActivations) {
  expect_decode_rows_match_batch(*this, 200, 1280, {1, 2, 3, 6, 7, 8});  // two splits of 640
}

// 177 tiles of 128 rows (22656) leave K in one split in bf16 (264 tiles) and two in fp8 (528):
// splits of 9216 and 4608 k, neither of which fits in shared memory, so 1 and 2 rows take the
// packed kernel with per-warp activations.
TEST_F(CudaDecodeMatmul, PackedDecodeMatmulWithPerWarpActivationsGivesTheSameBits) {
  expect_decode_rows_match_batch(*this, 22656, 9216, {1, 2});
}

// The 8B's down projection (4096 x 12288; in bf16 8 splits of 1536, fp8 16 of 768): at one row
// its bf16 512 CTAs fit in one wave with the shared activations only beside the smaller
// weight ring (10 KiB a warp).
TEST_F(CudaDecodeMatmul, DecodeMatmulWithTheSmallerRingGivesTheSameBits) {
  expect_decode_rows_match_batch(*this, 4096, 12288, {1, 2, 8});
}

// A plain product of 1 or 3 to 8 rows in 2, 3, 4 or 8 splits runs them in one CTA, a warp
// each, and adds them there (HIBANA_CUDA_CTA_SPLITS, on by default): the bits of the
// split-parallel kernel (=0) and of the rows in a batch of 12 (the tensor-core kernel). One
// row shares its activations, 3 and 8 load each warp's own. 600 x 1024: 2 splits, 2 row
// groups a CTA; 1000 x 1536: 3, in CTAs of 3 warps; 513 x 2048 (the 80B's router with the
// shared expert's gate): 4, the last CTA with one row; 300 x 2080: 4 splits of 640, the last
// of 160 (ending inside an fp8 chunk); 2048 x 4096 (the 80B's output projections): 8, in 128
// CTAs of 8 warps; 9216 x 2048 (its q/k/v): in bf16 3 of 768, the last of 512, in fp8 4 of
// 512 (fp8's tile target, 528). The last two fill one wave on a GPU the size of an H100 (with
// GB10's 48 SMs they may not: the split-parallel kernel runs), but fp8's 9216 rows at 3-8
// rows. 2 rows keep the split-parallel kernel.
TEST_F(CudaDecodeMatmul, DecodeMatmulWithItsSplitsInOneCtaGivesTheSameBits) {
  const bool large_gpu = cuda_shared_memory_per_block() > 101376;
  for (auto [N, K] : {std::pair<int64_t, int64_t>{600, 1024},
                      {1000, 1536},
                      {513, 2048},
                      {300, 2080},
                      {2048, 4096},
                      {9216, 2048}}) {
    const int64_t M = 12;
    auto x = randn(M * K, 9);
    for (DType dtype : {DType::bf16, DType::f8_e4m3}) {
      TestWeight w = make_weight(*this, dtype, N, K, 13);
      Tensor xd = upload(x.data(), DType::f32, {M, K});
      Tensor batch = device_f32(M, N);
      gpu->matmul(xd, w.dev, batch);
      const std::vector<float> all = download(batch);
      for (int64_t m : {1, 2, 3, 8}) {
        SCOPED_TRACE(testing::Message()
                     << dtype_name(dtype) << " " << N << " x " << K << ", " << m << " rows");
        Tensor one = device_f32(m, N), parallel = device_f32(m, N);
        const int64_t before = cuda_one_cta_split_products();
        gpu->matmul(xd.slice_rows(0, m), w.dev, one);
        const int64_t ran = cuda_one_cta_split_products() - before;
        // (fp8's 4 splits of 9216 rows at 3-8 rows: 576 CTAs, past one wave.)
        const bool past_wave = dtype == DType::f8_e4m3 && N == 9216 && m > 2;
        if ((N < 2048 || large_gpu) && !past_wave) {
          EXPECT_EQ(ran, m == 2 ? 0 : 1) << "in one CTA";
        }
        {
          ScopedEnv off("HIBANA_CUDA_CTA_SPLITS", "0");
          gpu->matmul(xd.slice_rows(0, m), w.dev, parallel);
        }
        EXPECT_EQ(cuda_one_cta_split_products() - before, ran);
        const std::vector<float> a = download(one), b = download(parallel);
        EXPECT_EQ(std::memcmp(a.data(), b.data(), m * N * sizeof(float)), 0) << "split-parallel";
        EXPECT_EQ(std::memcmp(a.data(), all.data(), m * N * sizeof(float)), 0) << "batch of " << M;
      }
    }
  }
}

}  // namespace
}  // namespace hibana
