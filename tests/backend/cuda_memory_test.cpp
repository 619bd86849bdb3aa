// The CUDA backend's device memory (backend/cuda/cuda_backend.cu's device_allocate). Skipped
// without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "support/cuda_fixture.h"

namespace hibana {
namespace {

class CudaMemory : public test::CudaFixture {};

// A request the driver cannot meet while the stream-ordered pool holds memory whose frees are
// still queued behind work on the stream: the backend waits for the stream, gives the pool's
// idle memory back and asks again, instead of failing. The pool is filled with 16 MiB buffers
// (pooled: below the large-allocation size) to within 1 GiB of the GPU's free memory, a long
// f32 product (~20 TFLOP with the SIMT kernel: the stream is busy for much longer than the
// host takes to go on) is queued, the buffers are freed behind it, and one buffer 2 GiB larger
// than what the driver has left (a cudaMalloc) is asked for at once. Before the fix it failed.
// The trim is counted (memory_info): from then on the prefill products' optional pre-split
// planes, which the pool would keep, are not asked for unless HIBANA_CUDA_TILED_PRESPLIT=1.
TEST_F(CudaMemory, ABufferWaitsForThePoolsQueuedFrees) {
  constexpr size_t kBlock = size_t(16) << 20;
  constexpr int64_t kGiB = int64_t(1) << 30;
  const int64_t M = 2048, N = 8192, K = 8192;
  Weight w;
  w.w = device_f32(N, K, 0.5f);
  const Tensor x = device_f32(M, K, 0.25f);
  Tensor out = device_f32(M, N);
  auto blocks = std::make_unique<std::vector<Buffer>>();
  while (gpu->memory_info().free > kGiB + static_cast<int64_t>(kBlock)) {
    blocks->emplace_back(kBlock, Device::cuda);
  }
  ASSERT_GT(static_cast<int64_t>(blocks->size() * kBlock), 4 * kGiB);
  for (int i = 0; i < 80; ++i) gpu->matmul(x, w, out);  // (queued, not waited for)
  blocks.reset();                                      // frees queued behind the products
  const int64_t left = gpu->memory_info().free;
  const int64_t trims = gpu->memory_info().pool_trims;
  std::unique_ptr<Buffer> big;
  const size_t bytes = static_cast<size_t>(left + 2 * kGiB);
  EXPECT_NO_THROW(big = std::make_unique<Buffer>(bytes, Device::cuda));
  EXPECT_EQ(download(out)[0], 0.5f * 0.25f * K);  // (the products ran)
  EXPECT_GT(gpu->memory_info().pool_trims, trims);  // (counted: the pre-split planes stop)
}

}  // namespace
}  // namespace hibana
