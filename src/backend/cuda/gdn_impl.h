// Private to the Gated DeltaNet files (gdn.cu: conv and the recurrent form, gdn_chunked.cu: the
// chunked form): what one recurrence launch reads, and which tokens of a sequence the chunked
// form takes.
#pragma once

#include <cstdint>

#include "backend/cuda/common.cuh"

namespace hibana::cuda::gdn {

constexpr int kChunk = 64;  // tokens of an aligned chunk (the CPU backend's gdn_detail::kChunk)

// Which of a sequence's tokens a recurrent launch walks: all of them, or those before or after
// the whole aligned chunks the chunked kernel takes (chunk_span).
enum class Part : int { all = 0, before_chunks = 1, after_chunks = 2 };

struct RecParams {
  const float* qkv;  // [T][q heads | k heads | v heads]: q at g * dk, k at (nk + g) * dk
  int64_t ldqkv;
  const float *b, *a;  // [T][nv]: beta = sigmoid(b), decay from a
  int64_t ldb, lda;
  const float *A_log, *dt_bias;  // [nv]
  float qscale;                  // dk^-1/2
  float* states;                 // [slots][nv][dk][dv]
  const int32_t* seq_start;
  const int32_t* slots;
  const int32_t* snaps;
  const int32_t* positions;  // (read by chunk_span only)
  int64_t nk, nv, dk, dv;
  float* out;
  int64_t ldo;
  Part part;
};

// The per-token arithmetic both forms share (the CPU's gdn.inc): a value head's log decay
// g = -exp(A_log) * softplus(a + dt_bias) (ea = exp(A_log)), beta = sigmoid(b), and the factor
// that L2-normalises a key_dim vector held as kPer values a lane (lane + 32 u; the values past
// dk zero): a lane's squares in order, the warp's sum, one reciprocal square root.
__device__ __forceinline__ float softplus_f(float x) {
  return x > 20.0f ? x : log1pf(expf(x));
}
__device__ __forceinline__ float log_decay(float ea, float a, float dt_bias) {
  return -ea * softplus_f(a + dt_bias);
}
__device__ __forceinline__ float beta_of(float b) {
  return 1.0f / (1.0f + expf(-b));
}
template <int kPer>
__device__ __forceinline__ float l2_inverse(const float (&xv)[kPer], int lane, int64_t dk) {
  float ss = 0.0f;
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    if (lane + 32 * u < dk) ss = fmaf(xv[u], xv[u], ss);
  }
  return 1.0f / sqrtf(warp_sum(ss) + 1e-6f);
}

// The whole aligned chunks of sequence s, the CPU backend's rule: tokens [first, end) where
// first is the sequence's first token at a position that is a multiple of kChunk and end - first
// the most whole chunks that fit; none (first = end = the sequence's end) where a token of the
// sequence takes a snapshot. Every thread of the CTA calls it (a barrier inside), after the
// previous kernel's wait.
struct ChunkSpan {
  int64_t first, end;
};
__device__ __forceinline__ ChunkSpan chunk_span(const RecParams& p, int64_t s) {
  const int64_t t0 = p.seq_start[s], t1 = p.seq_start[s + 1];
  bool snapshot = false;
  for (int64_t t = t0 + threadIdx.x; t < t1; t += blockDim.x) snapshot |= p.snaps[t] >= 0;
  if (__syncthreads_or(snapshot) || t1 <= t0) return {t1, t1};
  const int64_t first = t0 + (kChunk - p.positions[t0] % kChunk) % kChunk;
  if (first >= t1) return {t1, t1};
  return {first, first + (t1 - first) / kChunk * kChunk};
}

// The chunked form over the whole aligned chunks of each sequence of a pass of num_tokens tokens
// (gdn_chunked.cu); the tokens before and after them are the recurrent kernel's (Part).
void launch_chunked(const RecParams& p, int64_t num_seqs, int64_t num_tokens);
// Whether the chunked kernels take heads of these dims (both up to 128) on this GPU: their
// shared memory (the sequential kernel's 138 KiB) within smem_per_block(), so not on GPUs of
// 99 KiB per block (DGX Spark's GB10, sm_86/89/120), whose passes stay recurrent.
bool chunked_fits(int64_t key_dim, int64_t value_dim);

}  // namespace hibana::cuda::gdn
