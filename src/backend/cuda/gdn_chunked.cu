// The gated delta rule in chunked form on CUDA: a prompt's whole aligned chunks of kChunk tokens
// per step instead of one token per step (backend/cpu/gdn.inc's chunk_step, the maths, its names
// and its order of operations). Per chunk of a value head, with gam the running sum of the log
// decays g and kb_i = beta_i k_i:
//   T = (I + A)^-1 by forward substitution, A_ij = (kb_i . k_j) exp(gam_i - gam_j), j < i
//   (-A is what is stored and substituted, as on the CPU)
//   U = T (beta v),  W = T (kb exp(gam)),  vnew = U - W S
//   o_i = (q_i exp(gam_i)) S + sum_{j <= i} (q_i . k_j) exp(gam_i - gam_j) vnew_j
//   S <- S exp(gam_last) + sum_i (k_i exp(gam_last - gam_i)) vnew_iᵀ
// with q and k L2-normalised (q times dk^-1/2) as in the recurrent kernel. The results are the
// CPU's chunked form's up to rounding (sums in other orders), not the recurrent form's bits.
//
// Two passes. Everything that does not depend on the state (the gates, T, U, W and the q.k
// products) is prepared for every chunk at once: prepare_kernel, CTA = (chunk, value head), into
// scratch. Then sequential_kernel walks each sequence's chunks in order, CTA = (sequence, value
// head, kCols value columns) with its columns of the state in shared memory, doing only what
// needs the state: vnew, the outputs, the state update. Chunks go through the two passes kWindow
// at a time (the scratch of a window: 84 MB on the 80B), in the order chunk_list_kernel lists
// them. The single-pass kernel this replaced, which walked the chunks doing all of it (each of a
// head's four CTAs computing T again), took 96 us a chunk on the 80B's 8k prefill
// (docs/benchmarks.md, fifteenth slice).
#include <algorithm>
#include <cmath>

#include "backend/cuda/gdn_impl.h"
#include "backend/cuda/ops.h"

namespace hibana::cuda::gdn {

namespace {

constexpr int kCols = 32;  // value columns per CTA of the sequential pass
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxDk = 128;
constexpr int kMaxDv = 128;
constexpr int kRowTile = kChunk * kCols / (2 * kThreads);  // a thread's rows: 4 x 2 columns
static_assert(kCols == 32 && kRowTile * 16 == kChunk && kMaxDk % (16 * kRowTile) == 0, "tiles");
constexpr int kWindow = 32;  // chunks a prepare pass takes (bounds its scratch: 84 MB on the 80B)

// What the prepare pass leaves for the sequential one, per chunk of the window and value head.
struct alignas(16) Prepared {
  float w[kChunk][kMaxDk];   // W = T (kb exp(gam))
  float u[kChunk][kMaxDv];   // U = T (beta v)
  float qk[kChunk][kChunk];  // (q_i . k_j) exp(gam_i - gam_j), j <= i; zero above
  float gam[kChunk];         // the running sum of the log decays
};

// The pass's chunks in order (sequence, then position): chunk c starts at token token[c]; the
// chunks of sequence s are [first[s], first[s + 1]), and first[S] their number.
struct ChunkList {
  int32_t* first;  // [S + 1]
  int32_t* token;  // [the most chunks a pass of T tokens can have]
};

// q and k of a chunk's tokens from t, L2-normalised (q times qscale) into rows of q and k: a
// warp per row (l2_inverse, as the recurrent kernel), kBatch rows' loads issued at once (a
// warp's 16 rows would otherwise be 16 round trips to memory in a row).
template <int kPitch>
__device__ __forceinline__ void load_qk(const RecParams& p, int64_t t, int64_t g,
                                        float (*q)[kPitch], float (*k)[kPitch]) {
  constexpr int kPer = kMaxDk / 32, kBatch = 8;
  static_assert(2 * kChunk % (kWarps * kBatch) == 0, "rows per warp");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t dk = p.dk;
  for (int r0 = warp * kBatch; r0 < 2 * kChunk; r0 += kWarps * kBatch) {
    float xv[kBatch][kPer];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = (r0 + b) % kChunk, which = (r0 + b) / kChunk;  // 0: q, 1: k
      const float* src = p.qkv + (t + i) * p.ldqkv + (which * p.nk + g) * dk;
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const int64_t d = lane + 32 * u;
        xv[b][u] = d < dk ? src[d] : 0.0f;
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = (r0 + b) % kChunk, which = (r0 + b) / kChunk;
      const float inv = l2_inverse(xv[b], lane, dk);
      float* dst = which == 0 ? q[i] : k[i];
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const int64_t d = lane + 32 * u;
        if (d < dk) dst[d] = which == 0 ? (xv[b][u] * inv) * p.qscale : xv[b][u] * inv;
      }
    }
  }
}

// exp(gam_i) and exp(gam_last - gam_i) of a chunk from its running sums (threads < kChunk).
__device__ __forceinline__ void decays(const float* gam, float* eg, float* el) {
  if (threadIdx.x < kChunk) {
    eg[threadIdx.x] = expf(gam[threadIdx.x]);
    el[threadIdx.x] = expf(gam[kChunk - 1] - gam[threadIdx.x]);
  }
}

// The pass's chunk list (one CTA; chunk_span's rule per sequence).
__global__ void chunk_list_kernel(RecParams p, int64_t num_seqs, ChunkList list) {
  pdl_start();
  int32_t n = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const ChunkSpan span = chunk_span(p, s);
    const int32_t count = static_cast<int32_t>((span.end - span.first) / kChunk);
    if (threadIdx.x == 0) list.first[s] = n;
    for (int32_t c = threadIdx.x; c < count; c += blockDim.x) {
      list.token[n + c] = static_cast<int32_t>(span.first + static_cast<int64_t>(c) * kChunk);
    }
    n += count;
  }
  if (threadIdx.x == 0) list.first[num_seqs] = n;
}

// The prepare pass: CTA = (chunk of the window, value head); everything of a chunk that does not
// depend on the state, for every chunk at once.
struct PrepSmem {
  float q[kChunk][kMaxDk + 1], k[kChunk][kMaxDk + 1];  // (q's rows take v for U at the end)
  float t[kChunk][kChunk];                             // A, then T
  float row[kChunk];
  float gam[kChunk], beta[kChunk], eg[kChunk];
};

__global__ void __launch_bounds__(kThreads, 2)
    prepare_kernel(RecParams p, int64_t num_seqs, ChunkList list, int32_t c0, Prepared* prep) {
  extern __shared__ __align__(16) unsigned char raw[];
  PrepSmem& sh = *reinterpret_cast<PrepSmem*>(raw);
  const int64_t h = blockIdx.y;
  const float ea = expf(p.A_log[h]), dt_bias = p.dt_bias[h];  // constants: before the wait
  pdl_start();
  const int32_t c = c0 + static_cast<int32_t>(blockIdx.x);
  if (c >= list.first[num_seqs]) return;
  const int64_t t = list.token[c], dk = p.dk, dv = p.dv, g = h / (p.nv / p.nk);
  Prepared& out = prep[blockIdx.x * p.nv + h];
  load_qk<kMaxDk + 1>(p, t, g, sh.q, sh.k);
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
  }
  __syncthreads();
  if (threadIdx.x < kChunk) {
    sh.eg[threadIdx.x] = expf(sh.gam[threadIdx.x]);
    out.gam[threadIdx.x] = sh.gam[threadIdx.x];
  }
  // A (strictly below the diagonal) and the q.k products (on and below it).
  for (int i2 = threadIdx.x; i2 < kChunk * kChunk; i2 += kThreads) {
    const int i = i2 / kChunk, j = i2 % kChunk;
    if (j > i) {
      sh.t[i][j] = 0.0f;
      out.qk[i][j] = 0.0f;
      continue;
    }
    float kk = 0.0f, qk = 0.0f;
    for (int e = 0; e < dk; ++e) {
      kk = fmaf(sh.k[i][e] * sh.beta[i], sh.k[j][e], kk);
      qk = fmaf(sh.q[i][e], sh.k[j][e], qk);
    }
    const float decay = expf(sh.gam[i] - sh.gam[j]);
    sh.t[i][j] = j < i ? -(kk * decay) : 0.0f;
    out.qk[i][j] = qk * decay;
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
  // v of the chunk's tokens into q's rows (q is done with), zeros past dv.
  for (int i2 = threadIdx.x; i2 < kChunk * kMaxDv; i2 += kThreads) {
    const int i = i2 / kMaxDv, d = i2 % kMaxDv;
    sh.q[i][d] = d < dv ? p.qkv[(t + i) * p.ldqkv + 2 * p.nk * dk + h * dv + d] : 0.0f;
  }
  __syncthreads();
  // U = T (beta v), W = T (kb exp(gam)): the CPU's terms and order (j ascending), every column
  // of the scratch rows (zeros past dv and dk). A thread's tile: rows ti + 16 r, columns
  // td + 16 c.
  const int ti = threadIdx.x / 16, td = threadIdx.x % 16;
  constexpr int kRows = kChunk / 16, kTileCols = kMaxDk / 16;
  static_assert(kThreads == 256 && kMaxDk == kMaxDv, "prepare tiles");
  float acc[kRows][kTileCols];
  auto product = [&](auto&& operand, float(*dst)[kMaxDk], int64_t width) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int c = 0; c < kTileCols; ++c) acc[r][c] = 0.0f;
    }
    for (int j = 0; j <= ti + 16 * (kRows - 1); ++j) {
      float x[kTileCols];
#pragma unroll
      for (int c = 0; c < kTileCols; ++c) x[c] = operand(j, td + 16 * c);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (j > ti + 16 * r) continue;
        const float a = sh.t[ti + 16 * r][j];
#pragma unroll
        for (int c = 0; c < kTileCols; ++c) acc[r][c] = fmaf(a, x[c], acc[r][c]);
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int c = 0; c < kTileCols; ++c) {
        const int col = td + 16 * c;
        dst[ti + 16 * r][col] = col < width ? acc[r][c] : 0.0f;
      }
    }
  };
  product([&](int j, int d) { return sh.q[j][d] * sh.beta[j]; }, out.u, dv);
  product([&](int j, int e) { return (sh.k[j][e] * sh.beta[j]) * sh.eg[j]; }, out.w, dk);
}

// Copies a [kChunk][N] block of the scratch into shared rows (any pitch): every thread's
// 16-byte loads issued before its stores.
template <int N, int kPitch>
__device__ __forceinline__ void copy_rows(const float (&src)[kChunk][N], float (*dst)[kPitch]) {
  constexpr int kPieces = kChunk * N / 4 / kThreads;
  static_assert(kChunk * N % (4 * kThreads) == 0, "pieces");
  float4 v[kPieces];
#pragma unroll
  for (int u = 0; u < kPieces; ++u) {
    v[u] = reinterpret_cast<const float4*>(&src[0][0])[u * kThreads + threadIdx.x];
  }
#pragma unroll
  for (int u = 0; u < kPieces; ++u) {
    const int at = 4 * (u * kThreads + static_cast<int>(threadIdx.x)), i = at / N, e = at % N;
    dst[i][e] = v[u].x;
    dst[i][e + 1] = v[u].y;
    dst[i][e + 2] = v[u].z;
    dst[i][e + 3] = v[u].w;
  }
}

// The sequential pass: CTA = (sequence, value head, kCols of the head's value columns), walking
// the sequence's chunks of the window in order with its columns of the state in shared memory.
struct StepSmem {
  float q[kChunk][kMaxDk + 1], k[kChunk][kMaxDk + 1], w[kChunk][kMaxDk + 1];
  float qk[kChunk][kChunk];
  float vnew[kChunk][kCols];
  float s[kMaxDk][kCols];
  float gam[kChunk], eg[kChunk], el[kChunk];
};

__global__ void __launch_bounds__(kThreads, 1)
    sequential_kernel(RecParams p, ChunkList list, int32_t c0, const Prepared* prep) {
  extern __shared__ __align__(16) unsigned char raw[];
  StepSmem& sh = *reinterpret_cast<StepSmem*>(raw);
  const int64_t s = blockIdx.x, h = blockIdx.y, col0 = static_cast<int64_t>(blockIdx.z) * kCols;
  pdl_start();
  const int32_t slot = p.slots[s];
  const int32_t c_begin = max(list.first[s], c0), c_end = min(list.first[s + 1], c0 + kWindow);
  if (slot < 0 || c_begin >= c_end) return;
  const int64_t dk = p.dk, dv = p.dv, g = h / (p.nv / p.nk);
  const int cols = static_cast<int>(dv - col0 < kCols ? dv - col0 : kCols);
  float* S = p.states + (static_cast<int64_t>(slot) * p.nv + h) * dk * dv + col0;
  for (int i = threadIdx.x; i < kMaxDk * kCols; i += kThreads) {
    const int e = i / kCols, d = i % kCols;
    sh.s[e][d] = e < dk && d < cols ? S[e * dv + d] : 0.0f;
  }
  // A thread's tile: rows ti + 16 r (tokens, or state rows) by columns td and td + 16.
  const int ti = threadIdx.x / 16, td = threadIdx.x % 16;
  auto for_tile = [](auto&& f) {
#pragma unroll
    for (int r = 0; r < kRowTile; ++r) {
#pragma unroll
      for (int c = 0; c < 2; ++c) f(r, c);
    }
  };
  for (int32_t chunk = c_begin; chunk < c_end; ++chunk) {
    const int64_t t = list.token[chunk];
    const Prepared& in = prep[(chunk - c0) * p.nv + h];
    __syncthreads();  // the previous chunk is done with the shared arrays
    load_qk<kMaxDk + 1>(p, t, g, sh.q, sh.k);
    copy_rows(in.w, sh.w);
    copy_rows(in.qk, sh.qk);
    if (threadIdx.x < kChunk) sh.gam[threadIdx.x] = in.gam[threadIdx.x];
    __syncthreads();
    decays(sh.gam, sh.eg, sh.el);
    // vnew = U - W S (the CPU's sum: W S first, in e order).
    float acc[kRowTile][2];
    for_tile([&](int r, int c) { acc[r][c] = 0.0f; });
    for (int e = 0; e < dk; ++e) {
      const float s0 = sh.s[e][td], s1 = sh.s[e][td + 16];
#pragma unroll
      for (int r = 0; r < kRowTile; ++r) {
        const float w = sh.w[ti + 16 * r][e];
        acc[r][0] = fmaf(w, s0, acc[r][0]);
        acc[r][1] = fmaf(w, s1, acc[r][1]);
      }
    }
    for_tile([&](int r, int c) {
      const int i = ti + 16 * r, d = td + 16 * c;
      sh.vnew[i][d] = (d < cols ? in.u[i][col0 + d] : 0.0f) - acc[r][c];
    });
    __syncthreads();
    // The outputs, from the state before this chunk: (q_i exp(gam_i)) S in e order, then the
    // chunk's own tokens in j order.
    for_tile([&](int r, int c) { acc[r][c] = 0.0f; });
    for (int e = 0; e < dk; ++e) {
      const float s0 = sh.s[e][td], s1 = sh.s[e][td + 16];
#pragma unroll
      for (int r = 0; r < kRowTile; ++r) {
        const float qe = sh.q[ti + 16 * r][e] * sh.eg[ti + 16 * r];
        acc[r][0] = fmaf(qe, s0, acc[r][0]);
        acc[r][1] = fmaf(qe, s1, acc[r][1]);
      }
    }
    float intra[kRowTile][2];
    for_tile([&](int r, int c) { intra[r][c] = 0.0f; });
    for (int j = 0; j <= ti + 16 * (kRowTile - 1); ++j) {
      const float v0 = sh.vnew[j][td], v1 = sh.vnew[j][td + 16];
#pragma unroll
      for (int r = 0; r < kRowTile; ++r) {
        if (j > ti + 16 * r) continue;
        const float a = sh.qk[ti + 16 * r][j];
        intra[r][0] = fmaf(a, v0, intra[r][0]);
        intra[r][1] = fmaf(a, v1, intra[r][1]);
      }
    }
    for_tile([&](int r, int c) {
      const int i = ti + 16 * r, d = td + 16 * c;
      if (d < cols) p.out[(t + i) * p.ldo + h * dv + col0 + d] = acc[r][c] + intra[r][c];
    });
    __syncthreads();
    // The state after the chunk: rows e = ti + 16 m of the state, the chunk's tokens in order.
    const float el = sh.eg[kChunk - 1];
    for (int e0 = 0; e0 < dk; e0 += 16 * kRowTile) {
      float add[kRowTile][2];
      for_tile([&](int r, int c) { add[r][c] = 0.0f; });
      for (int i = 0; i < kChunk; ++i) {
        const float v0 = sh.vnew[i][td], v1 = sh.vnew[i][td + 16], eli = sh.el[i];
#pragma unroll
        for (int r = 0; r < kRowTile; ++r) {
          const float ke = sh.k[i][e0 + ti + 16 * r] * eli;
          add[r][0] = fmaf(ke, v0, add[r][0]);
          add[r][1] = fmaf(ke, v1, add[r][1]);
        }
      }
      for_tile([&](int r, int c) {
        const int e = e0 + ti + 16 * r, d = td + 16 * c;
        if (e < dk) sh.s[e][d] = sh.s[e][d] * el + add[r][c];
      });
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < dk * kCols; i += kThreads) {
    const int e = i / kCols, d = i % kCols;
    if (d < cols) S[e * dv + d] = sh.s[e][d];
  }
}

template <typename K>
void allow_smem(K kernel, size_t bytes) {
  HIBANA_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(bytes)));
}

}  // namespace

bool chunked_fits(int64_t key_dim, int64_t value_dim) {
  const size_t need = std::max(sizeof(PrepSmem), sizeof(StepSmem));
  return key_dim <= kMaxDk && value_dim <= kMaxDv && need <= static_cast<size_t>(smem_per_block());
}

void launch_chunked(const RecParams& p, int64_t num_seqs, int64_t num_tokens) {
  check(chunked_fits(p.dk, p.dv), ErrorKind::internal,
        "CUDA gdn: chunked form of too wide heads or on too little shared memory");
  static const bool configured = [] {
    allow_smem(prepare_kernel, sizeof(PrepSmem));
    allow_smem(sequential_kernel, sizeof(StepSmem));
    return true;
  }();
  (void)configured;
  // The most chunks a pass can hold: a sequence's chunks are its tokens past its first.
  const int64_t max_chunks = std::max<int64_t>(num_tokens / kChunk, 1);
  Scratch list_mem(sizeof(int32_t) * static_cast<size_t>(num_seqs + 1 + max_chunks));
  const ChunkList list{list_mem.as<int32_t>(), list_mem.as<int32_t>() + num_seqs + 1};
  launch_pdl(chunk_list_kernel, 1, kThreads, 0, p, num_seqs, list);
  launched("chunk_list_kernel");
  const int64_t window = std::min<int64_t>(kWindow, max_chunks);
  // (Pooled: 84 MB a window on the 80B, past the size whose cudaFree would wait for the device
  // in every DeltaNet layer.)
  Scratch prep_mem(sizeof(Prepared) * static_cast<size_t>(window * p.nv), true);
  const dim3 step_grid(static_cast<unsigned>(num_seqs), static_cast<unsigned>(p.nv),
                       static_cast<unsigned>((p.dv + kCols - 1) / kCols));
  for (int64_t c0 = 0; c0 < max_chunks; c0 += kWindow) {
    const int32_t first = static_cast<int32_t>(c0);
    launch_pdl(prepare_kernel, dim3(static_cast<unsigned>(window), static_cast<unsigned>(p.nv)),
               kThreads, sizeof(PrepSmem), p, num_seqs, list, first, prep_mem.as<Prepared>());
    launched("prepare_kernel");
    launch_pdl(sequential_kernel, step_grid, kThreads, sizeof(StepSmem), p, list, first,
               prep_mem.as<const Prepared>());
    launched("sequential_kernel");
  }
}

}  // namespace hibana::cuda::gdn
