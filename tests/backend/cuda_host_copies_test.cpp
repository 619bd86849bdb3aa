// The state tiers' batched copies on CUDA (backend/cuda/host_copies.cu): device rows to host
// memory and back, to a page-locked buffer (copied directly) and to ordinary memory (through
// the pinned staging), each row at its own offset.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "core/tensor.h"
#include "core/device_memory.h"
#include "core/host_bytes.h"
#include "support/random.h"

namespace hibana {
namespace {

TEST(CudaHostCopies, BatchedCopiesReachPinnedAndOrdinaryHostMemory) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU";
  auto gpu = make_cuda_backend();  // registers the device's memory functions
  const int64_t R = 3, C = 256;
  const size_t row = C * sizeof(float);
  std::vector<float> src = test::randn(R * C, 9);
  Buffer d(R * row, Device::cuda), back(R * row, Device::cuda);
  copy_bytes(d.data(), Device::cuda, src.data(), Device::cpu, R * row);
  for (bool pinned : {true, false}) {
    SCOPED_TRACE(pinned ? "pinned" : "ordinary");
    HostBytes pb(R * row);
    std::vector<uint8_t> vb(R * row);
    uint8_t* host = pinned ? pb.data() : vb.data();
    if (pinned) {
      EXPECT_TRUE(pb.pinned());
    }
    std::vector<ByteCopy> down, up;
    for (int64_t r = 0; r < R; ++r) {  // device row r lands at host row R - 1 - r
      down.push_back({host + (R - 1 - r) * row, static_cast<uint8_t*>(d.data()) + r * row, row});
      up.push_back({static_cast<uint8_t*>(back.data()) + r * row, host + (R - 1 - r) * row, row});
    }
    copy_batch(Device::cuda, down, true);
    for (int64_t r = 0; r < R; ++r) {
      EXPECT_EQ(std::memcmp(host + (R - 1 - r) * row, src.data() + r * C, row), 0) << r;
    }
    copy_batch(Device::cuda, up, false);
    std::vector<float> got(R * C);
    copy_bytes(got.data(), Device::cpu, back.data(), Device::cuda, R * row);
    EXPECT_EQ(got, src);
  }
}

}  // namespace
}  // namespace hibana
