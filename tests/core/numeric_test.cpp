#include "core/numeric.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace hibana {
namespace {

TEST(Numeric, Bf16RoundTripAndRounding) {
  for (float f : {0.0f, 1.0f, -2.5f, 3.140625f, 1e-30f, 65504.0f}) {
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(bf16_to_f32(f32_to_bf16(f)))), bf16_to_f32(f32_to_bf16(f)));
  }
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to even (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(Numeric, F16AllFiniteValuesRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t v = static_cast<uint16_t>(h);
    if ((v & 0x7c00) == 0x7c00) continue;  // inf / nan
    ASSERT_EQ(f32_to_f16(f16_to_f32(v)), v) << std::hex << h;
  }
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);  // overflow to inf
}

TEST(Numeric, Fp8E4m3) {
  EXPECT_EQ(f8e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0x7f)));
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    float v = f8e4m3_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(v)), v) << c;
  }
  EXPECT_EQ(f32_to_f8e4m3(1000.0f), 0x7e);  // saturates
}

// The bit-twiddling conversion equals the obvious one: the nearest of the 127 non-negative
// codes, ties to the even code, on values between and around every pair of codes.
TEST(Numeric, Fp8E4m3RoundsToNearestEven) {
  auto nearest = [](float f) -> uint8_t {
    const uint8_t sign = std::signbit(f) ? 0x80 : 0;
    const float a = std::fabs(f);
    if (a >= 448.0f) return sign | 0x7e;
    uint8_t best = 0;
    float best_err = a;
    for (uint8_t c = 1; c < 0x7f; ++c) {
      const float err = std::fabs(f8e4m3_to_f32(c) - a);
      if (err < best_err || (err == best_err && (c & 1) == 0 && (best & 1) == 1)) {
        best = c;
        best_err = err;
      }
    }
    return sign | best;
  };
  std::vector<float> probes = {0.0f, -0.0f, 1e-12f, 447.9f, 448.0f, 464.0f, 1e30f};
  for (int c = 0; c + 1 < 0x7f; ++c) {
    const float lo = f8e4m3_to_f32(static_cast<uint8_t>(c)), hi = f8e4m3_to_f32(static_cast<uint8_t>(c + 1));
    const float mid = 0.5f * (lo + hi);
    for (float v : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), 0.25f * lo + 0.75f * hi}) {
      probes.push_back(v);
      probes.push_back(-v);
    }
  }
  for (float v : probes) EXPECT_EQ(f32_to_f8e4m3(v), nearest(v)) << v;
}

TEST(DType, SafetensorsNames) {
  EXPECT_EQ(dtype_from_safetensors("BF16"), DType::bf16);
  EXPECT_EQ(dtype_from_safetensors("F8_E4M3"), DType::f8_e4m3);
  EXPECT_FALSE(dtype_from_safetensors("F8_E5M2").has_value());
  EXPECT_EQ(dtype_size(DType::f8_e4m3), 1u);
}

TEST(ThreadPool, RunsEveryItemOnceAndNests) {
  ThreadPool pool(4);
  std::vector<int> hits(1000, 0);
  pool.parallel_for(1000, [&](int64_t i) {
    hits[i]++;
    // A nested loop runs inline instead of deadlocking.
    pool.parallel_for(3, [&](int64_t) {});
  });
  for (int h : hits) EXPECT_EQ(h, 1);
  EXPECT_THROW(pool.parallel_for(10, [](int64_t i) {
    if (i == 7) throw std::runtime_error("boom");
  }),
               std::runtime_error);
  int count = 0;
  pool.parallel_for(1, [&](int64_t) { ++count; });  // still usable after an exception
  EXPECT_EQ(count, 1);
}

}  // namespace
}  // namespace hibana
