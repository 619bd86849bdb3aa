// The DeltaNet's causal conv1d, one channel's arithmetic: shared by its kernels (gdn.cu) and by
// the decode matmul that applies it to its outputs (matmul_gemv.cu), so they give the same bits.
#pragma once

#include "backend/cuda/common.cuh"

namespace hibana::cuda {

constexpr int kMaxConvWindow = 8;  // the most carried inputs (kernel size 9)

// A channel's taps, constants loaded before a kernel waits for the previous one: those on the
// window (up to the largest, zero past a shorter one's) in wc, the one on the new input in
// w_last. ok false (a thread past the work): zeros, nothing read.
// (Arrays of N >= K - 1 values: the same bits for every N.)
template <int N = kMaxConvWindow>
__device__ __forceinline__ void load_taps(const float* w, int K, int64_t c, bool ok, float (&wc)[N],
                                          float& w_last) {
  const int W = K - 1;
  w_last = 0.0f;
#pragma unroll
  for (int j = 0; j <= N; ++j) {
    const float v = ok && j < K ? w[c * K + j] : 0.0f;
    if (j < N) wc[j] = v;
    if (j == W) w_last = v;
  }
}

// One output of the conv: the taps on the window (oldest first), then on the new input xv, as
// explicit multiply-adds in tap order (what the compiler contracted the old loop into), then
// SiLU. Both conv kernels compute a token's output here, so they give the same bits.
template <int N>
__device__ __forceinline__ float conv_out(const float (&wc)[N], float w_last, const float (&win)[N],
                                          int W, float xv) {
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    if (j < W) acc = fmaf(wc[j], win[j], acc);
  }
  return silu_f(fmaf(w_last, xv, acc));
}

// Shifts xv into the window (ascending: reads before writes).
template <int N>
__device__ __forceinline__ void conv_shift(float (&win)[N], int W, float xv) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
    if (j + 1 < W) {
      win[j] = win[j + 1];
    } else if (j + 1 == W) {
      win[j] = xv;
    }
  }
}

// Stores the window into a state slot's W values of channel c.
template <int N>
__device__ __forceinline__ void conv_store(float* dst, const float (&win)[N], int W) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
    if (j < W) dst[j] = win[j];
  }
}

}  // namespace hibana::cuda
