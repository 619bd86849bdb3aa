// The CUDA backend's device memory (backend/cuda/cuda_backend.cu's device_allocate). Skipped
// without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"

namespace hibana {
namespace {

// A request the driver cannot meet while the stream-ordered pool holds freed memory: the
// backend gives the pool's idle memory back and asks again instead of failing. The pool is
// filled with 16 MiB buffers (pooled: below the large-allocation size) to within 1 GiB of the
// GPU's free memory and every one freed (the pool keeps them); then one buffer 2 GiB larger
// than the driver's free memory (a cudaMalloc) is asked for.
TEST(CudaMemory, ALargeBufferTakesBackThePoolsIdleMemory) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU";
  auto gpu = make_cuda_backend();  // registers the device's memory functions
  constexpr size_t kBlock = size_t(16) << 20;
  constexpr int64_t kGiB = int64_t(1) << 30;
  const int64_t free0 = gpu->memory_info().free;
  {
    std::vector<Buffer> blocks;
    while (gpu->memory_info().free > kGiB + static_cast<int64_t>(kBlock)) {
      blocks.emplace_back(kBlock, Device::cuda);
    }
  }
  gpu->synchronize();
  const int64_t free1 = gpu->memory_info().free;
  ASSERT_GT(free0 - free1, 4 * kGiB) << "the pool did not keep the freed buffers";
  Buffer big(static_cast<size_t>(free1 + 2 * kGiB), Device::cuda);
  EXPECT_NE(big.data(), nullptr);
}

}  // namespace
}  // namespace hibana
