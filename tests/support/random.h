// Deterministic random test data.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace hibana::test {

// n normal(0, scale) values from seed.
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

}  // namespace hibana::test
