// Register-tiled attention for prefill: a CTA takes R (token, head) rows — R / group consecutive
// tokens of one sequence and the group's query heads — against one split (128 positions, or
// AttnParams::split) of one KV head. Per 32-key tile, each thread computes a few rows x 4 keys of
// scores (so each K and Q value read from shared memory feeds several products) and then a few rows
// x 16 dimensions of the value sums.
//
// Bit-identical to attention_split_kernel for every (token, head): a score is four partial dot
// products over the dimensions d = i (mod 4), ascending, added as (d0 + d1) + (d2 + d3) and
// scaled; a tile's probability sum uses the same tree as warp_sum over 32 lanes (keys j and
// j ^ 16 first, then j ^ 8, 4, 2, 1: a thread holds keys c, c + 8, c + 16, c + 24, so the first
// two levels are its own and the rest are shuffles); values are added key by key in order with
// the same fmaf; tiles outside a token's range are skipped for it.
#include "backend/cuda/attention_impl.h"
#include "backend/cuda/ops.h"

namespace hibana::cuda::attn {

namespace {

constexpr int kThreads = 256;

// The block of consecutive tokens of one sequence this CTA serves (binary search of the
// per-sequence block list): first token tb, tn tokens. False when the CTA has none.
__device__ __forceinline__ bool cta_tokens(const AttnParams& p, int64_t& tb, int64_t& tn) {
  const int b = blockIdx.x;
  if (b >= p.block_start[p.num_seqs]) return false;
  int lo = 0, hi = p.num_seqs - 1;  // the last sequence whose first block is <= b
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.block_start[mid] <= b) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int64_t first = max(static_cast<int64_t>(p.seq_start[lo]), p.t_begin);
  const int64_t last = min(static_cast<int64_t>(p.seq_start[lo + 1]), p.t_begin + p.t_count);
  tb = first + static_cast<int64_t>(b - p.block_start[lo]) * p.block_tokens;
  tn = min(static_cast<int64_t>(p.block_tokens), last - tb);
  return tn > 0;
}

// Where each sequence's token blocks start among a launch's blocks (one CTA, a running sum).
__global__ void attention_blocks_kernel(const int32_t* seq_start, int S, int64_t t0, int64_t n,
                                        int qb, int32_t* block_start) {
  pdl_start();
  __shared__ int32_t carry;
  __shared__ int32_t part[1024];
  if (threadIdx.x == 0) carry = 0;
  for (int base = 0; base < S; base += blockDim.x) {
    const int s = base + static_cast<int>(threadIdx.x);
    int32_t blocks = 0;
    if (s < S) {
      const int64_t lo = max(static_cast<int64_t>(seq_start[s]), t0);
      const int64_t hi = min(static_cast<int64_t>(seq_start[s + 1]), t0 + n);
      blocks = hi > lo ? static_cast<int32_t>((hi - lo + qb - 1) / qb) : 0;
    }
    __syncthreads();
    part[threadIdx.x] = blocks;
    for (int off = 1; off < static_cast<int>(blockDim.x); off *= 2) {  // inclusive scan
      __syncthreads();
      const int32_t add = threadIdx.x >= static_cast<unsigned>(off) ? part[threadIdx.x - off] : 0;
      __syncthreads();
      part[threadIdx.x] += add;
    }
    __syncthreads();
    if (s < S) block_start[s] = carry + part[threadIdx.x] - blocks;
    __syncthreads();
    if (threadIdx.x == blockDim.x - 1) carry += part[threadIdx.x];
  }
  __syncthreads();
  if (threadIdx.x == 0) block_start[S] = carry;
}

template <int HD, int R>
struct Shape {
  static constexpr int kPitch = HD + 4;  // floats per Q and K row in shared memory
  static constexpr int kPPitch = kTile + 1;
  static constexpr int kRowsQK = R / 32;       // scores: rows per thread (x 4 keys), 8 key groups
  static constexpr int kDimGroups = 1024 / R;  // values: 4 rows x HD / kDimGroups dims a thread
  static constexpr int kChunks = HD / 4 / kDimGroups;  // float4s of dims per thread
  static_assert(kChunks >= 1 && HD % (4 * kDimGroups) == 0, "head_dim too small for R");
  static constexpr int kFloats = R * kPitch + 2 * kTile * kPitch + 2 * kTile * HD + R * kPPitch;
  static constexpr size_t kSmem = (kFloats + 2 * R) * sizeof(float);
};

template <int HD, int R>
__global__ void __launch_bounds__(kThreads, 1) tiled_kernel(AttnParams p) {
  pdl_start();
  using S = Shape<HD, R>;
  int64_t tb = 0, tn = 0;
  if (!cta_tokens(p, tb, tn)) return;
  const int64_t kvh = blockIdx.y, G = p.group;
  const int split = blockIdx.z;
  const int64_t begin = static_cast<int64_t>(split) * p.split;
  int64_t cta_end = begin;
  for (int i = 0; i < tn; ++i)
    cta_end = max(cta_end, min(static_cast<int64_t>(p.pos[tb + i]) + 1, begin + p.split));
  if (cta_end <= begin) return;

  // 128-byte aligned for its cp.async copies (gemv_kernel.cuh says why).
  extern __shared__ __align__(128) float sm[];
  float* qs = sm;                                       // [R][kPitch]
  float* ks = qs + R * S::kPitch;                       // [2][kTile][kPitch]
  float* vs = ks + 2 * kTile * S::kPitch;               // [2][kTile][HD]
  float* ps = vs + 2 * kTile * HD;                      // [R][kPPitch]
  float* alpha_s = ps + R * S::kPPitch;                 // [R]
  int* nvalid_s = reinterpret_cast<int*>(alpha_s + R);  // [R]
  const int tid = threadIdx.x;

  // Row r = (token tb + r / G, head kvh * G + r % G); rows past the CTA's tokens stay zero.
  for (int i = tid; i < R * (HD / 4); i += kThreads) {
    const int r = i / (HD / 4), d = (i % (HD / 4)) * 4;
    const int64_t tq = r / G;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (tq < tn) {
      const float* src = p.q + (tb + tq) * p.ldq + (kvh * G + r % G) * HD + d;
      v = make_float4(src[0], src[1], src[2], src[3]);
    }
    *reinterpret_cast<float4*>(qs + r * S::kPitch + d) = v;
  }
  const int32_t* pages = p.table + static_cast<int64_t>(p.token_seq[tb]) * p.max_pages;
  // A key's row in 32 bits (kv_row): a 32-bit division and remainder a copy, not 64-bit ones.
  const int page = static_cast<int>(p.page), kv_heads = static_cast<int>(p.kv_heads);
  const int head = static_cast<int>(kvh);
  auto load_tile = [&](int64_t j0, int slot) {
    float* kd = ks + slot * kTile * S::kPitch;
    float* vd = vs + slot * kTile * HD;
    for (int idx = tid; idx < kTile * (HD / 4); idx += kThreads) {
      const int j = idx / (HD / 4), d = (idx % (HD / 4)) * 4;
      const int pj = static_cast<int>(j0) + j;
      const bool ok = pj < cta_end;
      const int row = ok ? kv_row(pages, pj, page, kv_heads, head) : 0;
      const int64_t src = ok ? static_cast<int64_t>(row) * HD + d : 0;
      cp_async16(kd + j * S::kPitch + d, p.kp + src, ok);
      cp_async16(vd + j * HD + d, p.vp + src, ok);
    }
  };

  // Scores: thread = (key group c: keys c + 8q, rows rq0 .. rq0 + kRowsQK).
  const int c = tid % 8, rq0 = (tid / 8) * S::kRowsQK;
  int64_t end_q[S::kRowsQK];
  float m_run[S::kRowsQK], l_run[S::kRowsQK];
#pragma unroll
  for (int a = 0; a < S::kRowsQK; ++a) {
    const int64_t tq = (rq0 + a) / G;
    end_q[a] = tq < tn ? min(static_cast<int64_t>(p.pos[tb + tq]) + 1, begin + p.split) : begin;
    m_run[a] = -INFINITY;
    l_run[a] = 0.0f;
  }
  // Values: thread = (dim group dg: float4s dg + kDimGroups * i, rows rv0 .. rv0 + 4).
  const int dg = tid % S::kDimGroups, rv0 = (tid / S::kDimGroups) * 4;
  float acc[4][S::kChunks][4];
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int i = 0; i < S::kChunks; ++i)
      acc[a][i][0] = acc[a][i][1] = acc[a][i][2] = acc[a][i][3] = 0.0f;

  const int ntiles = static_cast<int>((cta_end - begin + kTile - 1) / kTile);
  load_tile(begin, 0);
  cp_async_commit();
  for (int it = 0; it < ntiles; ++it) {
    const int64_t j0 = begin + static_cast<int64_t>(it) * kTile;
    if (it + 1 < ntiles) load_tile(j0 + kTile, (it + 1) & 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();  // tile it has landed (and, the first time, Q)
    const float* kt = ks + (it & 1) * kTile * S::kPitch;
    const float* vt = vs + (it & 1) * kTile * HD;

    float d[S::kRowsQK][4][4];  // [row][key q][partial sum]
#pragma unroll
    for (int a = 0; a < S::kRowsQK; ++a)
#pragma unroll
      for (int q = 0; q < 4; ++q) d[a][q][0] = d[a][q][1] = d[a][q][2] = d[a][q][3] = 0.0f;
#pragma unroll 4
    for (int d4 = 0; d4 < HD / 4; ++d4) {
      float4 kv[4];
#pragma unroll
      for (int q = 0; q < 4; ++q)
        kv[q] = *reinterpret_cast<const float4*>(kt + (c + 8 * q) * S::kPitch + 4 * d4);
#pragma unroll
      for (int a = 0; a < S::kRowsQK; ++a) {
        const float4 qv = *reinterpret_cast<const float4*>(qs + (rq0 + a) * S::kPitch + 4 * d4);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          d[a][q][0] = fmaf(qv.x, kv[q].x, d[a][q][0]);
          d[a][q][1] = fmaf(qv.y, kv[q].y, d[a][q][1]);
          d[a][q][2] = fmaf(qv.z, kv[q].z, d[a][q][2]);
          d[a][q][3] = fmaf(qv.w, kv[q].w, d[a][q][3]);
        }
      }
    }
#pragma unroll
    for (int a = 0; a < S::kRowsQK; ++a) {
      const int r = rq0 + a;
      const int nv = static_cast<int>(max(int64_t{0}, min(end_q[a] - j0, int64_t{kTile})));
      if (c == 0) nvalid_s[r] = nv;
      // Rows without keys in this tile compute too (the shuffles need every lane) but keep
      // their state.
      float s[4], mx = -INFINITY;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const bool valid = c + 8 * q < nv;
        s[q] =
            valid ? ((d[a][q][0] + d[a][q][1]) + (d[a][q][2] + d[a][q][3])) * p.scale : -INFINITY;
        mx = fmaxf(mx, s[q]);
      }
#pragma unroll
      for (int o = 4; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_new = fmaxf(m_run[a], mx);
      float pj[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        pj[q] = c + 8 * q < nv ? expf(s[q] - m_new) : 0.0f;
        ps[r * S::kPPitch + c + 8 * q] = pj[q];
      }
      // warp_sum's tree over keys j: j ^ 16 (q ^ 2), j ^ 8 (q ^ 1), then j ^ 4, 2, 1 (c).
      float sum = (pj[0] + pj[2]) + (pj[1] + pj[3]);
#pragma unroll
      for (int o = 4; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      if (nv > 0) {
        const float alpha = expf(m_run[a] - m_new);
        l_run[a] = l_run[a] * alpha + sum;
        m_run[a] = m_new;
        if (c == 0) alpha_s[r] = alpha;
      }
    }
    __syncthreads();  // probabilities, rescales and counts are visible

    int nv[4], most = 0;
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      nv[a] = nvalid_s[rv0 + a];
      most = max(most, nv[a]);
      if (nv[a] == 0) continue;
      const float al = alpha_s[rv0 + a];
#pragma unroll
      for (int i = 0; i < S::kChunks; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[a][i][e] *= al;
    }
    for (int j = 0; j < most; ++j) {
      float4 v[S::kChunks];
#pragma unroll
      for (int i = 0; i < S::kChunks; ++i)
        v[i] = *reinterpret_cast<const float4*>(vt + j * HD + 4 * (dg + S::kDimGroups * i));
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        if (j >= nv[a]) continue;
        const float w = ps[(rv0 + a) * S::kPPitch + j];
#pragma unroll
        for (int i = 0; i < S::kChunks; ++i) {
          acc[a][i][0] = fmaf(w, v[i].x, acc[a][i][0]);
          acc[a][i][1] = fmaf(w, v[i].y, acc[a][i][1]);
          acc[a][i][2] = fmaf(w, v[i].z, acc[a][i][2]);
          acc[a][i][3] = fmaf(w, v[i].w, acc[a][i][3]);
        }
      }
    }
    __syncthreads();  // the slot and the probabilities are reused next
  }

  // Partial results of rows with keys in this split: acc..., then max and sum.
  auto out_of = [&](int r) {
    const int64_t t = tb + r / G, h = kvh * G + r % G;
    return p.partial + (((t - p.t_begin) * p.heads + h) * p.max_splits + split) * (HD + 2);
  };
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int r = rv0 + a;
    const int64_t tq = r / G;
    if (tq >= tn || static_cast<int64_t>(p.pos[tb + tq]) < begin) continue;
    float* out = out_of(r);
#pragma unroll
    for (int i = 0; i < S::kChunks; ++i) {  // records are hd + 2 floats: not 16-byte aligned
#pragma unroll
      for (int e = 0; e < 4; ++e) out[4 * (dg + S::kDimGroups * i) + e] = acc[a][i][e];
    }
  }
  if (c == 0) {
#pragma unroll
    for (int a = 0; a < S::kRowsQK; ++a) {
      if (end_q[a] <= begin) continue;
      float* out = out_of(rq0 + a);
      out[HD] = m_run[a];
      out[HD + 1] = l_run[a];
    }
  }
}

template <int HD, int R>
void launch(const AttnParams& p, int64_t ctas) {
  using S = Shape<HD, R>;
  static const bool configured = [] {
    HIBANA_CUDA(cudaFuncSetAttribute(tiled_kernel<HD, R>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(S::kSmem)));
    return true;
  }();
  (void)configured;
  dim3 grid(static_cast<unsigned>(ctas), static_cast<unsigned>(p.kv_heads),
            static_cast<unsigned>(p.max_splits));
  launch_pdl(tiled_kernel<HD, R>, grid, kThreads, S::kSmem, p);
  launched("attention_tiled_kernel");
}

// Rows per CTA for a head_dim: 128, or 64 where 128 rows would not fit in shared memory.
constexpr int rows_for(int64_t hd) {
  return hd <= 128 ? 128 : 64;
}

}  // namespace

int tiled_block_tokens(int64_t hd, int64_t group) {
  if (hd != 64 && hd != 128 && hd != 256) return 0;
  const int R = rows_for(hd);
  if (group < 1 || R % group != 0) return 0;
  const int optin = smem_per_block();
  const size_t need = hd == 64    ? Shape<64, 128>::kSmem
                      : hd == 128 ? Shape<128, 128>::kSmem
                                  : Shape<256, 64>::kSmem;
  if (need > static_cast<size_t>(optin)) return 0;
  return static_cast<int>(R / group);
}

void tiled_launch(AttnParams p, int32_t* block_start) {
  p.block_start = block_start;
  launch_pdl(attention_blocks_kernel, 1, 1024, 0, p.seq_start, p.num_seqs, p.t_begin, p.t_count,
             p.block_tokens, block_start);
  launched("attention_blocks_kernel");
  // At most one partial block per sequence.
  const int64_t ctas = (p.t_count + p.block_tokens - 1) / p.block_tokens + p.num_seqs;
  switch (p.hd) {
    case 64:
      return launch<64, 128>(p, ctas);
    case 128:
      return launch<128, 128>(p, ctas);
    default:
      return launch<256, 64>(p, ctas);
  }
}

}  // namespace hibana::cuda::attn
