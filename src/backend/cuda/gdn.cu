// Gated DeltaNet on CUDA: causal conv1d with carried state, and the gated delta rule in its
// recurrent form with the state in f32 (see backend/cpu/gdn.inc for the maths). Every token
// takes the recurrent step, so results do not depend on how a prompt is split into passes;
// the chunked form for long prefills is still to come.
#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

namespace hibana::cuda {

namespace {

constexpr int kMaxConvWindow = 8;
constexpr int kCols = 32;     // state columns (value dims) per CTA
constexpr int kQuarters = 4;  // row groups per column
constexpr int kMaxRows = 32;  // key dims per thread: key_dim <= 128

// One thread per (sequence, channel), walking the sequence's tokens in order.
__global__ void conv_kernel(const float* x, int64_t ldx, const float* w, int K, float* states,
                            const int32_t* seq_start, const int32_t* slots, const int32_t* snaps,
                            int64_t S, int64_t C, float* out, int64_t ldo) {
  pdl_start();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= S * C) return;
  const int64_t s = i / C, c = i % C;
  if (slots[s] < 0) {  // a padding row of a captured decode batch: no state, zero output
    for (int64_t t = seq_start[s]; t < seq_start[s + 1]; ++t) out[t * ldo + c] = 0.0f;
    return;
  }
  const int W = K - 1;
  float* st = states + (static_cast<int64_t>(slots[s]) * C + c) * W;
  float win[kMaxConvWindow];
  for (int j = 0; j < W; ++j) win[j] = st[j];
  const float* wc = w + c * K;
  for (int64_t t = seq_start[s]; t < seq_start[s + 1]; ++t) {
    const float xv = x[t * ldx + c];
    float acc = 0.0f;
    for (int j = 0; j < W; ++j) acc += wc[j] * win[j];
    acc += wc[W] * xv;
    out[t * ldo + c] = silu_f(acc);
    for (int j = 0; j + 1 < W; ++j) win[j] = win[j + 1];
    if (W > 0) win[W - 1] = xv;
    if (snaps[t] >= 0) {
      float* snap = states + (static_cast<int64_t>(snaps[t]) * C + c) * W;
      for (int j = 0; j < W; ++j) snap[j] = win[j];
    }
  }
  for (int j = 0; j < W; ++j) st[j] = win[j];
}

// One warp per (token, q-or-k, key head): L2-normalised q (times dk^-1/2) and k.
__global__ void qk_norm_kernel(const float* qkv, int64_t ldq, int64_t T, int64_t nk, int64_t dk,
                               float qscale, float* qk) {
  pdl_start();
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= T * 2 * nk) return;
  const int64_t t = w / (2 * nk), part = (w / nk) % 2, g = w % nk;
  const float* src = qkv + t * ldq + part * nk * dk + g * dk;
  float ss = 0.0f;
  for (int64_t d = lane; d < dk; d += 32) ss = fmaf(src[d], src[d], ss);
  ss = warp_sum(ss);
  const float inv = 1.0f / sqrtf(ss + 1e-6f);
  float* dst = qk + ((t * 2 + part) * nk + g) * dk;
  for (int64_t d = lane; d < dk; d += 32)
    dst[d] = part == 0 ? (src[d] * inv) * qscale : src[d] * inv;
}

__device__ __forceinline__ float softplus_f(float x) {
  return x > 20.0f ? x : log1pf(expf(x));
}

// beta = sigmoid(b), decay = exp(-exp(A_log) * softplus(a + dt_bias)), per (token, value head).
__global__ void gates_kernel(const float* b, int64_t ldb, const float* a, int64_t lda,
                             const float* A_log, const float* dt_bias, int64_t T, int64_t nv,
                             float* beta, float* decay) {
  pdl_start();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * nv) return;
  const int64_t t = i / nv, h = i % nv;
  beta[i] = 1.0f / (1.0f + expf(-b[t * ldb + h]));
  decay[i] = expf(-expf(A_log[h]) * softplus_f(a[t * lda + h] + dt_bias[h]));
}

struct RecParams {
  const float* qk;   // [T][2][nk][dk]
  const float* qkv;  // v at column 2 * nk * dk + h * dv
  int64_t ldqkv;
  const float* beta;
  const float* decay;
  float* states;  // [slots][nv][dk][dv]
  const int32_t* seq_start;
  const int32_t* slots;
  const int32_t* snaps;
  int64_t nk, nv, dk, dv;
  float* out;
  int64_t ldo;
};

// CTA = (sequence, value head, 32 state columns); thread = (column, quarter of the key rows).
__global__ void __launch_bounds__(kCols* kQuarters) recurrent_kernel(RecParams p) {
  pdl_start();
  const int64_t s = blockIdx.x, h = blockIdx.y;
  const int col = threadIdx.x % kCols, quarter = threadIdx.x / kCols;
  const int64_t c = static_cast<int64_t>(blockIdx.z) * kCols + col;
  if (p.slots[s] < 0) {  // a padding row of a captured decode batch: no state, zero output
    if (quarter == 0 && c < p.dv)
      for (int64_t t = p.seq_start[s]; t < p.seq_start[s + 1]; ++t)
        p.out[t * p.ldo + h * p.dv + c] = 0.0f;
    return;
  }
  const int64_t dk = p.dk, dv = p.dv, g = h / (p.nv / p.nk);
  const int64_t rows_per = (dk + kQuarters - 1) / kQuarters;
  const int64_t r0 = quarter * rows_per;
  const bool active = c < dv;
  __shared__ float qsh[128], ksh[128], red[kQuarters][kCols];

  float* S = p.states + (static_cast<int64_t>(p.slots[s]) * p.nv + h) * dk * dv;
  float st[kMaxRows];
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) {
    const int64_t i = r0 + r;
    st[r] = active && r < rows_per && i < dk ? S[i * dv + c] : 0.0f;
  }
  for (int64_t t = p.seq_start[s]; t < p.seq_start[s + 1]; ++t) {
    __syncthreads();
    for (int64_t d = threadIdx.x; d < dk; d += blockDim.x) {
      qsh[d] = p.qk[((t * 2 + 0) * p.nk + g) * dk + d];
      ksh[d] = p.qk[((t * 2 + 1) * p.nk + g) * dk + d];
    }
    __syncthreads();
    const float alpha = p.decay[t * p.nv + h], beta = p.beta[t * p.nv + h];
    float part = 0.0f;
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      const int64_t i = r0 + r;
      if (r < rows_per && i < dk) {
        st[r] *= alpha;
        part = fmaf(ksh[i], st[r], part);
      }
    }
    red[quarter][col] = part;
    __syncthreads();
    float kv = 0.0f;
#pragma unroll
    for (int qd = 0; qd < kQuarters; ++qd) kv += red[qd][col];
    const float v = active ? p.qkv[t * p.ldqkv + 2 * p.nk * dk + h * dv + c] : 0.0f;
    const float delta = (v - kv) * beta;
    float o = 0.0f;
#pragma unroll
    for (int r = 0; r < kMaxRows; ++r) {
      const int64_t i = r0 + r;
      if (r < rows_per && i < dk) {
        st[r] = fmaf(ksh[i], delta, st[r]);
        o = fmaf(qsh[i], st[r], o);
      }
    }
    __syncthreads();
    red[quarter][col] = o;
    __syncthreads();
    if (quarter == 0 && active) {
      float sum = 0.0f;
#pragma unroll
      for (int qd = 0; qd < kQuarters; ++qd) sum += red[qd][col];
      p.out[t * p.ldo + h * dv + c] = sum;
    }
    if (p.snaps[t] >= 0 && active) {
      float* snap = p.states + (static_cast<int64_t>(p.snaps[t]) * p.nv + h) * dk * dv;
#pragma unroll
      for (int r = 0; r < kMaxRows; ++r) {
        const int64_t i = r0 + r;
        if (r < rows_per && i < dk) snap[i * dv + c] = st[r];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) {
    const int64_t i = r0 + r;
    if (active && r < rows_per && i < dk) S[i * dv + c] = st[r];
  }
}

}  // namespace

void gdn_conv(const Tensor& x, const Tensor& w, Tensor conv_states, const BatchLayout& layout,
              Tensor out) {
  const int64_t C = x.shape[1], K = w.shape[1];
  check(w.shape[0] == C && conv_states.shape[1] == C && conv_states.shape[2] == K - 1,
        ErrorKind::internal, "gdn_conv: shapes");
  check(K >= 1 && K - 1 <= kMaxConvWindow, ErrorKind::unsupported, "CUDA gdn_conv: kernel above 9");
  const int64_t n = layout.num_seqs * C;
  if (n == 0) return;
  launch_pdl(conv_kernel, blocks_for(n, 128), 128, 0, x.ptr<float>(), ld(x), w.ptr<float>(),
             static_cast<int>(K), conv_states.ptr<float>(), layout.seq_start.ptr<int32_t>(),
             layout.state_slot.ptr<int32_t>(), layout.snapshot_slot.ptr<int32_t>(), layout.num_seqs,
             C, out.ptr<float>(), ld(out));
  launched("conv_kernel");
}

void gdn_recurrence(const Tensor& qkv, const Tensor& b, const Tensor& a, const Tensor& A_log,
                    const Tensor& dt_bias, const Backend::GdnShape& shape, Tensor states,
                    const BatchLayout& layout, Tensor out) {
  const int64_t nk = shape.key_heads, nv = shape.value_heads, dk = shape.key_dim,
                dv = shape.value_dim, T = layout.num_tokens;
  check(nv % nk == 0, ErrorKind::internal, "gdn: value heads not a multiple of key heads");
  check(qkv.shape[1] == 2 * nk * dk + nv * dv, ErrorKind::internal, "gdn: qkv width");
  check(dk <= kQuarters * kMaxRows, ErrorKind::unsupported, "CUDA gdn: key_dim above 128");
  if (T == 0) return;
  Scratch qk(static_cast<size_t>(T * 2 * nk * dk) * sizeof(float));
  Scratch gates(static_cast<size_t>(2 * T * nv) * sizeof(float));
  float* beta = gates.as<float>();
  float* decay = beta + T * nv;
  launch_pdl(qk_norm_kernel, blocks_for(T * 2 * nk * 32, 256), 256, 0, qkv.ptr<float>(), ld(qkv), T,
             nk, dk, static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk))), qk.as<float>());
  launched("qk_norm_kernel");
  launch_pdl(gates_kernel, blocks_for(T * nv, 256), 256, 0, b.ptr<float>(), ld(b), a.ptr<float>(),
             ld(a), A_log.ptr<float>(), dt_bias.ptr<float>(), T, nv, beta, decay);
  launched("gates_kernel");
  RecParams p{qk.as<float>(),
              qkv.ptr<float>(),
              ld(qkv),
              beta,
              decay,
              states.ptr<float>(),
              layout.seq_start.ptr<int32_t>(),
              layout.state_slot.ptr<int32_t>(),
              layout.snapshot_slot.ptr<int32_t>(),
              nk,
              nv,
              dk,
              dv,
              out.ptr<float>(),
              ld(out)};
  dim3 grid(static_cast<unsigned>(layout.num_seqs), static_cast<unsigned>(nv),
            static_cast<unsigned>((dv + kCols - 1) / kCols));
  launch_pdl(recurrent_kernel, grid, kCols * kQuarters, 0, p);
  launched("recurrent_kernel");
}

}  // namespace hibana::cuda
