// Test weights on both devices for the CUDA tests (the fixture keeps the device copies).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "core/numeric.h"
#include "support/cuda_fixture.h"
#include "support/random.h"

namespace hibana::test {

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

// E experts ([I, H] gate and up, [H, I] down, seeds from `seed`; bf16 unless asked) on both
// devices; keep holds their bytes.
struct ExpertSet {
  ExpertWeights host, dev;
  std::vector<TestWeight> keep;
};

inline ExpertSet make_experts(CudaFixture& t, int64_t E, int64_t H, int64_t I, uint32_t seed,
                              DType dtype = DType::bf16) {
  ExpertSet set;
  for (int64_t e = 0; e < E; ++e) {
    for (int m = 0; m < 3; ++m) {
      const bool down = m == 2;
      set.keep.push_back(make_weight(t, dtype, down ? H : I, down ? I : H,
                                     static_cast<uint32_t>(seed + 3 * e + m)));
    }
  }
  for (int64_t e = 0; e < E; ++e) {
    const TestWeight &g = set.keep[3 * e], &u = set.keep[3 * e + 1], &d = set.keep[3 * e + 2];
    set.host.gate.push_back(g.host);
    set.host.up.push_back(u.host);
    set.host.down.push_back(d.host);
    set.dev.gate.push_back(g.dev);
    set.dev.up.push_back(u.dev);
    set.dev.down.push_back(d.dev);
  }
  return set;
}

}  // namespace hibana::test
