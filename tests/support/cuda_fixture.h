// A test fixture with the CUDA and CPU backends (skipped without a GPU) and device copies of
// host data that live as long as the test, and test weights on both devices.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/device_memory.h"
#include "core/numeric.h"
#include "support/random.h"

namespace hibana::test {

class CudaFixture : public testing::Test {
 public:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU";
    gpu = make_cuda_backend();
    cpu = make_cpu_backend();
  }
  // A device copy of host bytes, kept alive by the fixture.
  Tensor upload(const void* data, DType dtype, std::initializer_list<int64_t> dims) {
    Tensor shape(nullptr, dtype, dims, Device::cuda);
    keep.push_back(std::make_unique<Buffer>(std::max<size_t>(shape.nbytes(), 4), Device::cuda));
    shape.data = keep.back()->data();
    copy_from_host(data, shape);
    return shape;
  }
  static std::vector<float> download(const Tensor& t) {
    std::vector<float> v(t.numel());
    copy_to_host(t, v.data());
    return v;
  }

  std::unique_ptr<Backend> gpu, cpu;
  std::vector<std::unique_ptr<Buffer>> keep;
};

// Weights of one dtype on both devices (fp8 with 128 x 128 block scales).
struct TestWeight {
  Weight host, dev;
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
};

inline TestWeight make_weight(CudaFixture& t, DType dtype, int64_t N, int64_t K, uint32_t seed) {
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

}  // namespace hibana::test
