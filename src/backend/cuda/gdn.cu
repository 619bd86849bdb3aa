// Gated DeltaNet on CUDA: causal conv1d with carried state, and the gated delta rule in its
// recurrent form with the state in f32 (see backend/cpu/gdn.inc for the maths). Every token
// takes the recurrent step, so results do not depend on how a prompt is split into passes —
// unless the layout asks for aligned chunks (HIBANA_CUDA_GDN_CHUNKED=0 declines them): then, as
// on the CPU, a sequence's whole aligned
// chunks take the chunked form (gdn_chunked.cu) and only the tokens before and after them the
// recurrent step.
#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/conv_impl.cuh"
#include "backend/cuda/gdn_impl.h"
#include "backend/cuda/ops.h"

namespace hibana::cuda {

namespace {

constexpr int kCols = 32;     // state columns (value dims) per CTA
constexpr int kQuarters = 4;  // row groups per column
constexpr int kMaxRows = 32;  // key dims per thread: key_dim <= 128

// One thread per (sequence, channel), walking the sequence's tokens in order: decode, and passes
// of few tokens per sequence. Taps and window stay in registers.
__global__ void conv_kernel(const float* x, int64_t ldx, const float* w, int K, float* states,
                            const int32_t* seq_start, const int32_t* slots, const int32_t* snaps,
                            int64_t S, int64_t C, float* out, int64_t ldo) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t s = i / C, c = i % C;
  const int W = K - 1;
  float wc[kMaxConvWindow], w_last;
  load_taps(w, K, c, i < S * C, wc, w_last);
  pdl_start();
  if (i >= S * C) return;
  // The slot and the token range together, a token's input and snapshot slot before its
  // output is stored (a store could alias them for the compiler).
  const int32_t slot = slots[s];
  const int64_t t_first = seq_start[s], t_end = seq_start[s + 1];
  if (slot < 0) {  // a padding row of a captured decode batch: no state, zero output
    for (int64_t t = t_first; t < t_end; ++t) out[t * ldo + c] = 0.0f;
    return;
  }
  float* st = states + (static_cast<int64_t>(slot) * C + c) * W;
  float win[kMaxConvWindow];
#pragma unroll
  for (int j = 0; j < kMaxConvWindow; ++j) win[j] = j < W ? st[j] : 0.0f;
  for (int64_t t = t_first; t < t_end; ++t) {
    const float xv = x[t * ldx + c];
    const int32_t snap_slot = snaps[t];
    out[t * ldo + c] = conv_out(wc, w_last, win, W, xv);
    conv_shift(win, W, xv);
    if (snap_slot >= 0) conv_store(states + (static_cast<int64_t>(snap_slot) * C + c) * W, win, W);
  }
  conv_store(st, win, W);
}

// Prefill: the tokens in parallel. A thread takes one channel of kConvRun consecutive tokens of
// the pass (they may cross into the next sequences), its window filled once from the carried
// state and the inputs before its first token, then slid in registers: the same window values
// and the same conv_out as conv_kernel, so the same bits. It writes the outputs and the
// snapshots but not the carried states, which earlier tokens still read: conv_state_kernel
// stores those afterwards. (Snapshot slots are never a live sequence's slot, as on the CPU.)
constexpr int kConvRun = 8;

// The sequence holding token t: the last s with seq_start[s] <= t (S is small: a binary search).
__device__ __forceinline__ int64_t seq_of(const int32_t* seq_start, int64_t S, int64_t t) {
  int64_t lo = 0, hi = S - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (seq_start[mid] <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// The window before token t of a sequence starting at t0 with carried state st: positions
// t - W .. t - 1, those before t0 from the state.
__device__ __forceinline__ void conv_window(const float* x, int64_t ldx, int64_t c, const float* st,
                                            int W, int64_t t0, int64_t t,
                                            float (&win)[kMaxConvWindow]) {
#pragma unroll
  for (int j = 0; j < kMaxConvWindow; ++j) {
    if (j >= W) {
      win[j] = 0.0f;
      continue;
    }
    const int64_t pos = t - W + j;
    win[j] = pos >= t0 ? x[pos * ldx + c] : st[W - (t0 - pos)];
  }
}

__global__ void conv_tokens_kernel(const float* x, int64_t ldx, const float* w, int K,
                                   float* states, const int32_t* seq_start, const int32_t* slots,
                                   const int32_t* snaps, int64_t S, int64_t T, int64_t C,
                                   float* out, int64_t ldo) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t runs = (T + kConvRun - 1) / kConvRun;
  const int64_t run = i / C, c = i % C;
  const int W = K - 1;
  float wc[kMaxConvWindow], w_last;
  load_taps(w, K, c, run < runs, wc, w_last);
  pdl_start();
  if (run >= runs) return;
  const int64_t t_first = run * kConvRun, t_last = min(T, t_first + kConvRun);
  int64_t s = seq_of(seq_start, S, t_first), t_next = seq_start[s + 1];
  int32_t slot = slots[s];
  float win[kMaxConvWindow] = {};
  if (slot >= 0) {
    conv_window(x, ldx, c, states + (static_cast<int64_t>(slot) * C + c) * W, W, seq_start[s],
                t_first, win);
  }
  for (int64_t t = t_first; t < t_last; ++t) {
    if (t == t_next) {  // the next sequence starts: its window is its carried state
      while (t >= seq_start[s + 1]) ++s;
      t_next = seq_start[s + 1];
      slot = slots[s];
      if (slot >= 0)
        conv_window(x, ldx, c, states + (static_cast<int64_t>(slot) * C + c) * W, W, t, t, win);
    }
    if (slot < 0) {  // a padding row: no state, zero output
      out[t * ldo + c] = 0.0f;
      continue;
    }
    const float xv = x[t * ldx + c];
    const int32_t snap_slot = snaps[t];
    out[t * ldo + c] = conv_out(wc, w_last, win, W, xv);
    conv_shift(win, W, xv);
    if (snap_slot >= 0) conv_store(states + (static_cast<int64_t>(snap_slot) * C + c) * W, win, W);
  }
}

// After conv_tokens_kernel: each sequence's carried state becomes the window after its last
// token (one thread per (sequence, channel), reading everything before it writes).
__global__ void conv_state_kernel(const float* x, int64_t ldx, int K, float* states,
                                  const int32_t* seq_start, const int32_t* slots, int64_t S,
                                  int64_t C) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  pdl_start();
  if (i >= S * C) return;
  const int64_t s = i / C, c = i % C;
  const int32_t slot = slots[s];
  if (slot < 0) return;
  const int W = K - 1;
  float* st = states + (static_cast<int64_t>(slot) * C + c) * W;
  float win[kMaxConvWindow];
  conv_window(x, ldx, c, st, W, seq_start[s], seq_start[s + 1], win);
  conv_store(st, win, W);
}

using gdn::RecParams;

// CTA = (sequence, value head, 32 state columns); thread = (column, quarter of the key rows). Per
// token, before the delta rule, the CTA prepares its inputs itself (once separate kernels, with the
// same operations): warp 0 L2-normalises the key head's q (times dk^-1/2), warp 1 its k, into
// shared memory; thread 64 takes the gates, beta = sigmoid(b) and decay = exp(-exp(A_log) *
// softplus(a + dt_bias)). Every load of a token is issued before the barrier that frees the shared
// arrays, so a token costs one round trip to memory. p.part: the tokens before or after the
// sequence's whole aligned chunks only (the chunked kernels', launched between the two), or all.
// kD: 128 where the key and value dims both are (Qwen3-Next's: each thread's 32 rows need no
// bounds test and a row's address no 64-bit product, and the kernel is 36 KB of SASS instead
// of 66), 0 for any other dims (key dims up to 128).
template <int kD>
__global__ void __launch_bounds__(kCols* kQuarters) recurrent_kernel(RecParams p) {
  const int64_t s = blockIdx.x, h = blockIdx.y;
  const int col = threadIdx.x % kCols, quarter = threadIdx.x / kCols;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t c = static_cast<int64_t>(blockIdx.z) * kCols + col;
  const float ea = expf(p.A_log[h]), dt_bias = p.dt_bias[h];  // constants: before the wait
  __shared__ float qsh[128], ksh[128], red[kQuarters][kCols], gate[2];
  const int64_t dv = kD > 0 ? kD : p.dv;
  const bool active = c < dv;
  // The head's key group and the quarter's rows, before the wait (64-bit divisions).
  const int64_t dk = kD > 0 ? kD : p.dk, g = h / (p.nv / p.nk);
  const int64_t rows_per = (dk + kQuarters - 1) / kQuarters;
  const int64_t r0 = quarter * rows_per;
  pdl_start();
  const int32_t slot = p.slots[s];
  int64_t t_first = p.seq_start[s], t_end = p.seq_start[s + 1];
  if (slot < 0) {  // a padding row of a captured decode batch: no state, zero output
    if (quarter == 0 && active) {
      for (int64_t t = t_first; t < t_end; ++t) p.out[t * p.ldo + h * dv + c] = 0.0f;
    }
    return;
  }
  if (p.part != gdn::Part::all) {
    const gdn::ChunkSpan span = gdn::chunk_span(p, s);
    if (p.part == gdn::Part::before_chunks) {
      t_end = span.first;
    } else {
      t_first = span.end;
    }
    if (t_first >= t_end) return;  // (the same for the whole CTA: the state stays as it is)
  }
  float* S = p.states + (static_cast<int64_t>(slot) * p.nv + h) * dk * dv;
  float st[kMaxRows];
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) {
    const int64_t i = r0 + r;
    st[r] = active && r < rows_per && i < dk ? S[i * dv + c] : 0.0f;
  }
  constexpr int kPerLane = kQuarters * kMaxRows / 32;  // q or k values per lane (dk <= 128)
  for (int64_t t = t_first; t < t_end; ++t) {
    const float* row = p.qkv + t * p.ldqkv;
    float xv[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      xv[i] = warp < 2 && d < dk ? row[(warp * p.nk + g) * dk + d] : 0.0f;
    }
    const float bv = threadIdx.x == 64 ? p.b[t * p.ldb + h] : 0.0f;
    const float av = threadIdx.x == 64 ? p.a[t * p.lda + h] : 0.0f;
    const float v = active ? row[2 * p.nk * dk + h * dv + c] : 0.0f;
    const int32_t snap_slot = p.snaps[t];
    __syncthreads();  // the previous token is done with the shared arrays
    if (warp < 2) {
      const float inv = gdn::l2_inverse(xv, lane, dk);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int64_t d = lane + 32 * i;
        if (d >= dk) continue;
        if (warp == 0) {
          qsh[d] = (xv[i] * inv) * p.qscale;
        } else {
          ksh[d] = xv[i] * inv;
        }
      }
    }
    if (threadIdx.x == 64) {
      gate[0] = expf(gdn::log_decay(ea, av, dt_bias));
      gate[1] = gdn::beta_of(bv);
    }
    __syncthreads();
    const float alpha = gate[0], beta = gate[1];
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
    if (snap_slot >= 0 && active) {
      float* snap = p.states + (static_cast<int64_t>(snap_slot) * p.nv + h) * dk * dv;
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

// Whether a pass's conv runs over its tokens in parallel (conv_tokens_kernel, then
// conv_state_kernel) rather than a thread walking each sequence (conv_kernel): where sequences
// average 32 tokens or more (prefill; decode and verification passes walk). The same bits
// either way. On by default (the 80B's 8k-token prefill on an H100: conv 444 -> 41 ms, 3215 ->
// 3415 tokens/s; HIBANA_CUDA_CONV_TOKENS=0 walks); a conv in place always walks (out = x:
// a thread reads the inputs of earlier tokens, which other threads overwrite).
bool conv_by_tokens(int64_t T, int64_t S) {
  return T >= 4 * kConvRun * S && knob_on("HIBANA_CUDA_CONV_TOKENS", true);
}

}  // namespace

void gdn_conv(const Tensor& x, const Tensor& w, Tensor conv_states, const BatchLayout& layout,
              Tensor out) {
  const int64_t C = x.shape[1], K = w.shape[1];
  check(w.shape[0] == C && conv_states.shape[1] == C && conv_states.shape[2] == K - 1,
        ErrorKind::internal, "gdn_conv: shapes");
  check(K >= 1 && K - 1 <= kMaxConvWindow, ErrorKind::unsupported, "CUDA gdn_conv: kernel above 9");
  const int64_t S = layout.num_seqs, T = layout.num_tokens;
  if (S == 0) return;
  const int32_t* seq_start = layout.seq_start.ptr<int32_t>();
  const int32_t* slots = layout.state_slot.ptr<int32_t>();
  float* states = conv_states.ptr<float>();
  if (conv_by_tokens(T, S) && out.data != x.data) {  // (in place, only the walk: see above)
    const int64_t n = (T + kConvRun - 1) / kConvRun * C;
    launch_pdl(conv_tokens_kernel, blocks_for(n, 128), 128, 0, x.ptr<float>(), ld(x),
               w.ptr<float>(), static_cast<int>(K), states, seq_start, slots,
               layout.snapshot_slot.ptr<int32_t>(), S, T, C, out.ptr<float>(), ld(out));
    launched("conv_tokens_kernel");
    launch_pdl(conv_state_kernel, blocks_for(S * C, 128), 128, 0, x.ptr<float>(), ld(x),
               static_cast<int>(K), states, seq_start, slots, S, C);
    launched("conv_state_kernel");
    return;
  }
  launch_pdl(conv_kernel, blocks_for(S * C, 128), 128, 0, x.ptr<float>(), ld(x), w.ptr<float>(),
             static_cast<int>(K), states, seq_start, slots, layout.snapshot_slot.ptr<int32_t>(), S,
             C, out.ptr<float>(), ld(out));
  launched("conv_kernel");
}

namespace {

// Whether a pass takes the chunked form for its sequences' whole aligned chunks (the CPU's way;
// HIBANA_CUDA_GDN_CHUNKED=0 declines it. On an H100 the 80B's 8k-token prefill recurrence went
// 1290 -> 440 ms, the pass 3215 -> 3994 tokens/s with the conv over tokens and pooled scratch):
// the layout asks for aligned chunks and
// a sequence can hold one (kChunk tokens, the others one each at least: never in decode), and
// the heads and the GPU fit the chunked kernels (key and value dims up to 128, and 138 KiB of
// shared memory per block; others stay recurrent).
bool chunked_pass(const BatchLayout& layout, const Backend::GdnShape& shape) {
  return layout.gdn_mode == GdnMode::aligned_chunks &&
         gdn::chunked_fits(shape.key_dim, shape.value_dim) &&
         layout.num_tokens - layout.num_seqs + 1 >= gdn::kChunk &&
         knob_on("HIBANA_CUDA_GDN_CHUNKED", true);
}

}  // namespace

void gdn_recurrence(const Tensor& qkv, const Tensor& b, const Tensor& a, const Tensor& A_log,
                    const Tensor& dt_bias, const Backend::GdnShape& shape, Tensor states,
                    const BatchLayout& layout, Tensor out) {
  const int64_t nk = shape.key_heads, nv = shape.value_heads, dk = shape.key_dim,
                dv = shape.value_dim, T = layout.num_tokens;
  check(nv % nk == 0, ErrorKind::internal, "gdn: value heads not a multiple of key heads");
  check(qkv.shape[1] == 2 * nk * dk + nv * dv, ErrorKind::internal, "gdn: qkv width");
  check(dk <= kQuarters * kMaxRows, ErrorKind::unsupported, "CUDA gdn: key_dim above 128");
  if (T == 0) return;
  RecParams p{};
  p.qkv = qkv.ptr<float>();
  p.ldqkv = ld(qkv);
  p.b = b.ptr<float>();
  p.ldb = ld(b);
  p.a = a.ptr<float>();
  p.lda = ld(a);
  p.A_log = A_log.ptr<float>();
  p.dt_bias = dt_bias.ptr<float>();
  p.qscale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dk)));
  p.states = states.ptr<float>();
  p.seq_start = layout.seq_start.ptr<int32_t>();
  p.slots = layout.state_slot.ptr<int32_t>();
  p.snaps = layout.snapshot_slot.ptr<int32_t>();
  p.positions = layout.positions.ptr<int32_t>();
  p.nk = nk;
  p.nv = nv;
  p.dk = dk;
  p.dv = dv;
  p.out = out.ptr<float>();
  p.ldo = ld(out);
  const dim3 grid(static_cast<unsigned>(layout.num_seqs), static_cast<unsigned>(nv),
                  static_cast<unsigned>((dv + kCols - 1) / kCols));
  // A chunked pass: the recurrent kernel for the tokens before each sequence's chunks, the
  // chunked form, the recurrent kernel for the tokens after.
  const bool chunked = chunked_pass(layout, shape);
  p.part = chunked ? gdn::Part::before_chunks : gdn::Part::all;
  auto kernel = dk == 128 && dv == 128 ? recurrent_kernel<128> : recurrent_kernel<0>;
  launch_pdl(kernel, grid, kCols * kQuarters, 0, p);
  launched("recurrent_kernel");
  if (!chunked) return;
  gdn::launch_chunked(p, layout.num_seqs, T);
  p.part = gdn::Part::after_chunks;
  launch_pdl(kernel, grid, kCols * kQuarters, 0, p);
  launched("recurrent_kernel");
}

}  // namespace hibana::cuda
