// The gated delta rule in chunked form on CUDA: a prompt's whole aligned chunks of kChunk tokens
// per step instead of one token per step (backend/cpu/gdn.inc's chunk_step, the maths and its
// names). Per chunk of a value head, with gam the running sum of the log decays g and
// kb_i = beta_i k_i:
//   T = (I + A)^-1 by forward substitution, A_ij = (kb_i . k_j) exp(gam_i - gam_j), j < i
//   (-A is what is stored and substituted, as on the CPU)
//   vnew = T X,  X_i = beta_i v_i - (kb_i exp(gam_i)) S      (the CPU: U - W S, the same value)
//   o_i = (q_i exp(gam_i)) S + sum_{j <= i} (q_i . k_j) exp(gam_i - gam_j) vnew_j
//   S <- S exp(gam_last) + sum_i (k_i exp(gam_last - gam_i)) vnew_iᵀ
// with q and k L2-normalised (q times dk^-1/2) as in the recurrent kernel. The results are the
// CPU's chunked form's up to rounding (sums in other orders), not the recurrent form's bits.
//
// CTA = (sequence, value head, kCols of the head's value columns), walking the sequence's chunks
// in order with its columns of the state in shared memory. What does not depend on the columns
// (the normalised q and k, the gates, T, the q.k products) each CTA of a head computes for
// itself. Shared memory: q, k [kChunk][dk] (rows padded by a word: a warp reading one column of
// 32 rows hits 32 banks), T and the q.k products [kChunk][kChunk], X and vnew [kChunk][kCols],
// S [dk][kCols]: 130 KiB at dk = 128, one CTA per SM.
#include <cmath>

#include "backend/cuda/gdn_impl.h"

namespace hibana::cuda::gdn {

namespace {

constexpr int kCols = 32;  // value columns per CTA
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxDk = 128;

struct Smem {
  float q[kChunk][kMaxDk + 1], k[kChunk][kMaxDk + 1];
  float t[kChunk][kChunk];   // A, then T (lower triangle and diagonal)
  float qk[kChunk][kChunk];  // (q_i . k_j) exp(gam_i - gam_j), j <= i
  float x[kChunk][kCols], vnew[kChunk][kCols];
  float s[kMaxDk][kCols];
  float row[kChunk];
  float gam[kChunk], beta[kChunk];
  float eg[kChunk], el[kChunk];  // exp(gam_i), exp(gam_last - gam_i)
};

__global__ void __launch_bounds__(kThreads, 1) chunked_kernel(RecParams p) {
  extern __shared__ __align__(16) unsigned char raw[];
  Smem& sh = *reinterpret_cast<Smem*>(raw);
  const int64_t s = blockIdx.x, h = blockIdx.y, col0 = static_cast<int64_t>(blockIdx.z) * kCols;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float ea = expf(p.A_log[h]), dt_bias = p.dt_bias[h];  // constants: before the wait
  pdl_start();
  const int32_t slot = p.slots[s];
  if (slot < 0) return;  // (no prefill has padding rows; as the recurrent kernel, nothing to do)
  const ChunkSpan span = chunk_span(p, s);
  if (span.first >= span.end) return;
  const int64_t dk = p.dk, dv = p.dv, g = h / (p.nv / p.nk);
  const int cols = static_cast<int>(dv - col0 < kCols ? dv - col0 : kCols);
  float* S = p.states + (static_cast<int64_t>(slot) * p.nv + h) * dk * dv + col0;
  for (int i = threadIdx.x; i < dk * kCols; i += kThreads) {
    const int e = i / kCols, d = i % kCols;
    sh.s[e][d] = d < cols ? S[e * dv + d] : 0.0f;
  }
  for (int64_t t = span.first; t < span.end; t += kChunk) {
    __syncthreads();  // the previous chunk is done with the shared arrays
    // q and k of the chunk's tokens, L2-normalised: a warp per row (l2_inverse, as the
    // recurrent kernel).
    for (int r = warp; r < 2 * kChunk; r += kWarps) {
      const int i = r % kChunk, which = r / kChunk;  // 0: q, 1: k
      const float* src = p.qkv + (t + i) * p.ldqkv + (which * p.nk + g) * dk;
      float xv[kMaxDk / 32];
#pragma unroll
      for (int u = 0; u < kMaxDk / 32; ++u) {
        const int64_t d = lane + 32 * u;
        xv[u] = d < dk ? src[d] : 0.0f;
      }
      const float inv = l2_inverse(xv, lane, dk);
      float* dst = which == 0 ? sh.q[i] : sh.k[i];
#pragma unroll
      for (int u = 0; u < kMaxDk / 32; ++u) {
        const int64_t d = lane + 32 * u;
        if (d < dk) dst[d] = which == 0 ? (xv[u] * inv) * p.qscale : xv[u] * inv;
      }
    }
    // The gates (log decay g into gam, summed below) and this CTA's columns of v, as X's first
    // term once beta is known.
    if (threadIdx.x < kChunk) {
      const int64_t tt = t + threadIdx.x;
      sh.gam[threadIdx.x] = log_decay(ea, p.a[tt * p.lda + h], dt_bias);
      sh.beta[threadIdx.x] = beta_of(p.b[tt * p.ldb + h]);
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // the running sum in token order, as the CPU
      float acc = 0.0f;
      for (int i = 0; i < kChunk; ++i) {
        acc += sh.gam[i];
        sh.gam[i] = acc;
      }
      for (int i = 0; i < kChunk; ++i) {
        sh.eg[i] = expf(sh.gam[i]);
        sh.el[i] = expf(acc - sh.gam[i]);
      }
    }
    for (int i = threadIdx.x; i < kChunk * kCols; i += kThreads) {
      const int r = i / kCols, d = i % kCols;
      sh.x[r][d] = d < cols ? p.qkv[(t + r) * p.ldqkv + 2 * p.nk * dk + h * dv + col0 + d] : 0.0f;
    }
    __syncthreads();
    // A (strictly below the diagonal) and the q.k products (on and below it).
    for (int i2 = threadIdx.x; i2 < kChunk * kChunk; i2 += kThreads) {
      const int i = i2 / kChunk, j = i2 % kChunk;
      if (j > i) {
        sh.t[i][j] = 0.0f;
        sh.qk[i][j] = 0.0f;
        continue;
      }
      float kk = 0.0f, qk = 0.0f;
      for (int e = 0; e < dk; ++e) {
        kk = fmaf(sh.k[i][e] * sh.beta[i], sh.k[j][e], kk);
        qk = fmaf(sh.q[i][e], sh.k[j][e], qk);
      }
      const float decay = expf(sh.gam[i] - sh.gam[j]);
      sh.t[i][j] = j < i ? -(kk * decay) : 0.0f;
      sh.qk[i][j] = qk * decay;
    }
    __syncthreads();
    // Forward substitution, row by row: T[i, :i] = A[i, :i] + A[i, :i] T[:i, :i] (the CPU's order
    // of the sum over m), then the unit diagonal.
    for (int i = 1; i < kChunk; ++i) {
      if (threadIdx.x < i) sh.row[threadIdx.x] = sh.t[i][threadIdx.x];
      __syncthreads();
      if (threadIdx.x < i) {
        const int j = threadIdx.x;
        float sum = 0.0f;
        for (int m = 0; m < i; ++m) sum += sh.row[m] * sh.t[m][j];
        sh.t[i][j] = sh.row[j] + sum;
      }
      __syncthreads();
    }
    if (threadIdx.x < kChunk) sh.t[threadIdx.x][threadIdx.x] += 1.0f;
    // X_i = beta_i v_i - (kb_i exp(gam_i)) S.
    for (int i2 = threadIdx.x; i2 < kChunk * kCols; i2 += kThreads) {
      const int i = i2 / kCols, d = i2 % kCols;
      const float w = sh.beta[i] * sh.eg[i];
      float ws = 0.0f;
      for (int e = 0; e < dk; ++e) ws = fmaf(sh.k[i][e] * w, sh.s[e][d], ws);
      sh.x[i][d] = sh.x[i][d] * sh.beta[i] - ws;
    }
    __syncthreads();
    // vnew = T X.
    for (int i2 = threadIdx.x; i2 < kChunk * kCols; i2 += kThreads) {
      const int i = i2 / kCols, d = i2 % kCols;
      float v = 0.0f;
      for (int j = 0; j <= i; ++j) v = fmaf(sh.t[i][j], sh.x[j][d], v);
      sh.vnew[i][d] = v;
    }
    __syncthreads();
    // The outputs, from the state before this chunk.
    for (int i2 = threadIdx.x; i2 < kChunk * kCols; i2 += kThreads) {
      const int i = i2 / kCols, d = i2 % kCols;
      const float eg = sh.eg[i];
      float o = 0.0f;
      for (int e = 0; e < dk; ++e) o = fmaf(sh.q[i][e] * eg, sh.s[e][d], o);
      float intra = 0.0f;
      for (int j = 0; j <= i; ++j) intra = fmaf(sh.qk[i][j], sh.vnew[j][d], intra);
      if (d < cols) p.out[(t + i) * p.ldo + h * dv + col0 + d] = o + intra;
    }
    __syncthreads();
    // The state after the chunk.
    const float el = sh.eg[kChunk - 1];
    for (int i2 = threadIdx.x; i2 < dk * kCols; i2 += kThreads) {
      const int e = i2 / kCols, d = i2 % kCols;
      float add = 0.0f;
      for (int i = 0; i < kChunk; ++i) add = fmaf(sh.k[i][e] * sh.el[i], sh.vnew[i][d], add);
      sh.s[e][d] = sh.s[e][d] * el + add;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < dk * kCols; i += kThreads) {
    const int e = i / kCols, d = i % kCols;
    if (d < cols) S[e * dv + d] = sh.s[e][d];
  }
}

}  // namespace

void launch_chunked(const RecParams& p, int64_t num_seqs) {
  check(p.dk <= kMaxDk, ErrorKind::unsupported, "CUDA gdn: key_dim above 128");
  static const bool configured = [] {
    HIBANA_CUDA(cudaFuncSetAttribute(chunked_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(sizeof(Smem))));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>(num_seqs), static_cast<unsigned>(p.nv),
                  static_cast<unsigned>((p.dv + kCols - 1) / kCols));
  launch_pdl(chunked_kernel, grid, kThreads, sizeof(Smem), p);
  launched("chunked_kernel");
}

}  // namespace hibana::cuda::gdn
