// Scalar conversions between f32 and the 16- and 8-bit float formats (round to nearest even).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace hibana {

inline float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return bits_to_f32(sign);
    float v = std::ldexp(static_cast<float>(man), -24);  // subnormal
    return sign ? -v : v;
  }
  if (exp == 31) return bits_to_f32(sign | 0x7f800000u | (man << 13));
  return bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

inline uint16_t f32_to_f16(float f) {
  uint32_t u = f32_to_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow → inf
  if (abs < 0x38800000u) {  // subnormal or zero in f16
    float v = bits_to_f32(abs);
    uint32_t m = static_cast<uint32_t>(std::nearbyint(v * 16777216.0f));  // v / 2^-24
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
}

// FP8 E4M3 ("fn" variant): bias 7, no infinities, S.1111.111 is NaN, max 448.
inline float f8e4m3_to_f32(uint8_t v) {
  uint32_t sign = v >> 7;
  uint32_t exp = (v >> 3) & 0xfu;
  uint32_t man = v & 0x7u;
  float r;
  if (exp == 0xf && man == 0x7) {
    r = NAN;
  } else if (exp == 0) {
    r = std::ldexp(static_cast<float>(man), -9);
  } else {
    r = std::ldexp(1.0f + static_cast<float>(man) / 8.0f, static_cast<int>(exp) - 7);
  }
  return sign ? -r : r;
}

// Saturating conversion (values beyond ±448 clamp to ±448), round to nearest even.
inline uint8_t f32_to_f8e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;
  if (a < 0.015625f) {  // below the smallest normal (2^-6): multiples of 2^-9
    // nearbyint rounds half to even; 8 * 2^-9 lands exactly on the smallest normal's code.
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  const uint32_t u = f32_to_bits(a);
  int32_t exp = static_cast<int32_t>(u >> 23) - 127;
  uint32_t man = (u >> 20) & 7u;
  const uint32_t rest = u & 0xfffffu, half = 0x80000u;
  if (rest > half || (rest == half && (man & 1u))) ++man;
  if (man == 8) {
    man = 0;
    ++exp;
  }
  const uint32_t code = (static_cast<uint32_t>(exp + 7) << 3) | man;
  return sign | static_cast<uint8_t>(code > 0x7e ? 0x7e : code);
}

}  // namespace hibana
