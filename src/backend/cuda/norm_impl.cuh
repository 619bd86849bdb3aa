// The wide norm's arithmetic (one 256-thread CTA per group of G values: whole hidden rows),
// shared by the norm kernels (elementwise.cu) and the kernels that end in one (moe.cu's
// combine, add and norm), so that a fused kernel has the bits of the separate ones.
#pragma once

#include <type_traits>

#include "backend/cuda/common.cuh"

namespace hibana::cuda {

constexpr int kWideThreads = 256;
// Values of x per thread held in registers (kC, 8, 16 or 24: rows up to 2048, 4096, 6144, all
// held; longer rows loop over the rest) — a kernel per count, so that a row of 2048 does not
// carry 24 unrolled slots (the add + norm kernel was 34 KB of SASS). Slots past G add exact
// zeros to the sum of squares, so every count gives the same bits.
constexpr int kWideCachedMax = 24;
inline int wide_cached_for(int64_t G) {
  return G <= 8 * kWideThreads ? 8 : G <= 16 * kWideThreads ? 16 : kWideCachedMax;
}
// f(std::integral_constant<int, kC>{}) for G's count (a launch picks its kernel with it).
template <typename F>
void with_wide_cached(int64_t G, F&& f) {
  switch (wide_cached_for(G)) {
    case 8:
      return f(std::integral_constant<int, 8>{});
    case 16:
      return f(std::integral_constant<int, 16>{});
    default:
      return f(std::integral_constant<int, kWideCachedMax>{});
  }
}

// The norm weights of a thread's first kC values (constants: a kernel loads them before it
// waits for the previous one).
template <int kC>
__device__ __forceinline__ void wide_norm_weights(const float* w, int64_t G, float (&wv)[kC]) {
#pragma unroll
  for (int j = 0; j < kC; ++j) {
    const int64_t i = threadIdx.x + kWideThreads * j;
    wv[j] = i < G ? w[i] : 0.0f;
  }
}

// y = x * rsqrt(mean(x^2) + eps) * w (or * (1 + w)), and for the gated form * silu(z), over one
// group xr[0 .. G) by the whole CTA, with a fixed two-level reduction (each thread's values in
// order, warps, then the 8 warp sums in order). kAdd: first x += ar (in place: the residual add
// before a norm; the same additions as the add kernel's). A thread keeps its first kC
// values in registers, with their weights (wv: wide_norm_weights) and gates, so every load of a
// pass issues before any store — a store may alias a later load (x is updated in place, y may
// be x), so interleaved, each load waits for the one before (a 4096-wide add + norm took 14.2
// us on the H200 that way). kL2: x is read from L2 (__ldcg), where other CTAs of the kernel
// wrote it (the combine's split form, moe.cu).
template <bool kGated, bool kAdd, bool kL2 = false, int kC>
__device__ __forceinline__ void wide_norm_group(const float* xr, const float* zr, const float* ar,
                                                const float* w, const float (&wv)[kC],
                                                float eps, bool zero_centred, int64_t G,
                                                float* yr) {
  float* xw = const_cast<float*>(xr);  // kAdd: x is updated in place
  auto x_at = [&](int64_t i) { return kL2 ? __ldcg(xr + i) : xr[i]; };
  auto load = [&](int64_t i) {  // x[i], after the residual add (each i by one thread only)
    if constexpr (kAdd) {
      const float s = x_at(i) + ar[i];
      xw[i] = s;
      return s;
    } else {
      return x_at(i);
    }
  };
  __shared__ float part[kWideThreads / 32];
  float v[kC], zv[kC];
#pragma unroll
  for (int j = 0; j < kC; ++j) {
    const int64_t i = threadIdx.x + kWideThreads * j;
    v[j] = i < G ? x_at(i) : 0.0f;
    if constexpr (kGated) zv[j] = i < G ? zr[i] : 0.0f;
  }
  if constexpr (kAdd) {
    float a[kC];
#pragma unroll
    for (int j = 0; j < kC; ++j) {
      const int64_t i = threadIdx.x + kWideThreads * j;
      a[j] = i < G ? ar[i] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kC; ++j) {
      const int64_t i = threadIdx.x + kWideThreads * j;
      if (i < G) {
        v[j] = v[j] + a[j];
        xw[i] = v[j];
      }
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kC; ++j) ss = fmaf(v[j], v[j], ss);  // (adds exact zeros past G)
  for (int64_t i = threadIdx.x + kWideThreads * kC; i < G; i += kWideThreads) {
    const float xi = load(i);
    ss = fmaf(xi, xi, ss);
  }
  ss = warp_sum(ss);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < kWideThreads / 32; ++i) total += part[i];
  const float inv = rms_inverse(total, static_cast<float>(G), eps);
  auto norm = [&](float xi, float wi) {
    return zero_centred ? (xi * inv) * (1.0f + wi) : wi * (xi * inv);
  };
#pragma unroll
  for (int j = 0; j < kC; ++j) {
    const int64_t i = threadIdx.x + kWideThreads * j;
    if (i >= G) continue;
    float y = norm(v[j], wv[j]);
    if constexpr (kGated) y *= silu_f(zv[j]);
    yr[i] = y;
  }
  for (int64_t i = threadIdx.x + kWideThreads * kC; i < G; i += kWideThreads) {
    float y = norm(x_at(i), w[i]);
    if constexpr (kGated) y *= silu_f(zr[i]);
    yr[i] = y;
  }
}

}  // namespace hibana::cuda
