// The wide norm's arithmetic (one 256-thread CTA per group of G values: whole hidden rows),
// shared by the norm kernels (elementwise.cu) and the kernels that end in one (moe.cu's
// combine, add and norm), so that a fused kernel has the bits of the separate ones.
#pragma once

#include "backend/cuda/common.cuh"

namespace hibana::cuda {

constexpr int kWideThreads = 256;
constexpr int kWideCached = 24;  // values of x per thread held in registers (rows up to 6144)

// The norm weights of a thread's first kWideCached values (constants: a kernel loads them
// before it waits for the previous one).
__device__ __forceinline__ void wide_norm_weights(const float* w, int64_t G,
                                                  float (&wv)[kWideCached]) {
#pragma unroll
  for (int j = 0; j < kWideCached; ++j) {
    const int64_t i = threadIdx.x + kWideThreads * j;
    wv[j] = i < G ? w[i] : 0.0f;
  }
}

// y = x * rsqrt(mean(x^2) + eps) * w (or * (1 + w)), and for the gated form * silu(z), over one
// group xr[0 .. G) by the whole CTA, with a fixed two-level reduction (each thread's values in
// order, warps, then the 8 warp sums in order). kAdd: first x += ar (in place: the residual add
// before a norm; the same additions as the add kernel's). A thread keeps its first kWideCached
// values in registers, with their weights (wv: wide_norm_weights) and gates, so every load of a
// pass issues before any store — a store may alias a later load (x is updated in place, y may
// be x), so interleaved, each load waits for the one before (a 4096-wide add + norm took 14.2
// us on the H200 that way). kL2: x is read from L2 (__ldcg), where other CTAs of the kernel
// wrote it (the combine's split form, moe.cu).
template <bool kGated, bool kAdd, bool kL2 = false>
__device__ __forceinline__ void wide_norm_group(const float* xr, const float* zr, const float* ar,
                                                const float* w, const float (&wv)[kWideCached],
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
  float v[kWideCached], zv[kWideCached];
#pragma unroll
  for (int j = 0; j < kWideCached; ++j) {
    const int64_t i = threadIdx.x + kWideThreads * j;
    v[j] = i < G ? x_at(i) : 0.0f;
    if constexpr (kGated) zv[j] = i < G ? zr[i] : 0.0f;
  }
  if constexpr (kAdd) {
    float a[kWideCached];
#pragma unroll
    for (int j = 0; j < kWideCached; ++j) {
      const int64_t i = threadIdx.x + kWideThreads * j;
      a[j] = i < G ? ar[i] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kWideCached; ++j) {
      const int64_t i = threadIdx.x + kWideThreads * j;
      if (i < G) {
        v[j] = v[j] + a[j];
        xw[i] = v[j];
      }
    }
  }
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kWideCached; ++j) ss = fmaf(v[j], v[j], ss);  // (adds exact zeros past G)
  for (int64_t i = threadIdx.x + kWideThreads * kWideCached; i < G; i += kWideThreads) {
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
  for (int j = 0; j < kWideCached; ++j) {
    const int64_t i = threadIdx.x + kWideThreads * j;
    if (i >= G) continue;
    float y = norm(v[j], wv[j]);
    if constexpr (kGated) y *= silu_f(zv[j]);
    yr[i] = y;
  }
  for (int64_t i = threadIdx.x + kWideThreads * kWideCached; i < G; i += kWideThreads) {
    float y = norm(x_at(i), w[i]);
    if constexpr (kGated) y *= silu_f(zr[i]);
    yr[i] = y;
  }
}

}  // namespace hibana::cuda
