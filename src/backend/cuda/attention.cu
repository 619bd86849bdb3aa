// Paged KV storage and causal GQA attention on CUDA.
//
// A token's keys are cut into fixed splits of kSplit absolute positions. One CTA per (token,
// KV head, split) runs an online softmax over its split, one warp per query head of the group,
// sharing each 32-key tile of K and V through shared memory; a second kernel merges the splits
// of each (token, head) in split order. Split boundaries depend only on positions, so a token's
// output does not depend on the batch it came in or on how its prompt was chunked.
#include <algorithm>
#include <array>
#include <cmath>
#include <memory>

#include "backend/cuda/attention_impl.h"
#include "backend/cuda/ops.h"

namespace hibana::cuda {

namespace {

using namespace attn;

__global__ void store_kv_kernel(const float* k, int64_t ldk, const float* v, int64_t ldv, float* kp,
                                float* vp, const int32_t* slots, int64_t T, int64_t kv_heads,
                                int64_t page, int64_t hd) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * kv_heads * hd) return;
  const int64_t t = i / (kv_heads * hd), h = (i / hd) % kv_heads, d = i % hd;
  const int64_t slot = slots[t];
  if (slot < 0) return;  // a padding row of a captured decode batch: nothing to store
  const int64_t pg = slot / page, off = slot % page;
  const int64_t dst = ((pg * kv_heads + h) * page + off) * hd + d;
  kp[dst] = k[t * ldk + h * hd + d];
  vp[dst] = v[t * ldv + h * hd + d];
}

// CTA = (block of tokens of one sequence, KV head, split); warp = (query head of the group,
// TQ consecutive tokens of the block). Every token's arithmetic is the same whatever TQ and the
// block size (keys in 32-key tiles, four partial dot products per key, an online softmax per
// tile, values added key by key), so prefill and decode agree bit for bit; tokens only share
// the K/V tiles in shared memory and each lane's reads of them.
template <int TQ>
__global__ void attention_split_kernel(AttnParams p) {
  const int64_t kvh = blockIdx.y;
  const int split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t hd = p.hd, h = kvh * p.group + warp % p.group;
  int64_t tb = 0, tn = 0;  // the CTA's first token, its token count
  if (!cta_tokens(p, tb, tn)) return;
  const int64_t begin = static_cast<int64_t>(split) * kSplit;
  // This warp's tokens and where each one's keys in the split end (0: none here).
  const int64_t t0 = tb + static_cast<int64_t>(warp / p.group) * TQ;
  int64_t end[TQ];
  int64_t cta_end = 0;
  for (int i = 0; i < tn; ++i)
    cta_end = max(cta_end, min(static_cast<int64_t>(p.pos[tb + i]) + 1, begin + kSplit));
  if (cta_end <= begin) return;
#pragma unroll
  for (int k = 0; k < TQ; ++k) {
    const bool mine = t0 + k < tb + tn;
    end[k] = mine ? min(static_cast<int64_t>(p.pos[t0 + k]) + 1, begin + kSplit) : begin;
  }
  const int32_t* pages = p.table + static_cast<int64_t>(p.token_seq[tb]) * p.max_pages;

  // K rows padded to hd + 4 floats: 16-byte aligned, and a quarter-warp's float4 reads of 8
  // consecutive keys hit distinct banks. p.stages tiles of K and V are in flight (cp.async): the
  // next tile loads while this one is used.
  extern __shared__ float sm[];
  const int64_t kstride = kTile * (hd + 4), vstride = kTile * hd;
  float* ks = sm;                                        // [stages][kTile][hd + 4]
  float* vs = ks + p.stages * kstride;                   // [stages][kTile][hd]
  float* qs = vs + p.stages * vstride + warp * TQ * hd;  // this warp's [TQ][hd]
#pragma unroll
  for (int k = 0; k < TQ; ++k)
    for (int64_t d = lane; d < hd; d += 32)
      qs[k * hd + d] = end[k] > begin ? p.q[(t0 + k) * p.ldq + h * hd + d] : 0.0f;

  const int q4 = static_cast<int>(hd / 4);  // four values per copy (hd % 4 == 0, checked)
  auto load_tile = [&](int64_t j0, int slot) {
    float* kd = ks + slot * kstride;
    float* vd = vs + slot * vstride;
    for (int idx = threadIdx.x; idx < kTile * q4; idx += blockDim.x) {
      const int j = idx / q4, d = (idx % q4) * 4;
      const int64_t pj = j0 + j;
      const bool ok = pj < cta_end;
      const int64_t src =
          ok ? ((pages[pj / p.page] * p.kv_heads + kvh) * p.page + pj % p.page) * hd + d : 0;
      cp_async16(kd + j * (hd + 4) + d, p.kp + src, ok);
      cp_async16(vd + j * hd + d, p.vp + src, ok);
    }
  };

  float acc[TQ][kMaxDimsPerLane], m_run[TQ], l_run[TQ];
#pragma unroll
  for (int k = 0; k < TQ; ++k) {
    m_run[k] = -INFINITY;
    l_run[k] = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxDimsPerLane; ++i) acc[k][i] = 0.0f;
  }
  const int ntiles = static_cast<int>((cta_end - begin + kTile - 1) / kTile);
  load_tile(begin, 0);
  cp_async_commit();
  for (int it = 0; it < ntiles; ++it) {
    const int64_t j0 = begin + static_cast<int64_t>(it) * kTile;
    if (p.stages == 2 && it + 1 < ntiles) load_tile(j0 + kTile, (it + 1) & 1);
    cp_async_commit();
    if (p.stages == 2) {
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int slot = p.stages == 2 ? (it & 1) : 0;
    const float* kt = ks + slot * kstride;
    const float* vt = vs + slot * vstride;
    // Scores of key j0 + lane: four independent sums (one per float4 lane), added at the end.
    float d0[TQ], d1[TQ], d2[TQ], d3[TQ];
#pragma unroll
    for (int k = 0; k < TQ; ++k) d0[k] = d1[k] = d2[k] = d3[k] = 0.0f;
    const float4* kr = reinterpret_cast<const float4*>(kt + lane * (hd + 4));
    for (int d = 0; d < q4; ++d) {
      const float4 b = kr[d];
#pragma unroll
      for (int k = 0; k < TQ; ++k) {
        const float4 a = reinterpret_cast<const float4*>(qs + k * hd)[d];
        d0[k] = fmaf(a.x, b.x, d0[k]);
        d1[k] = fmaf(a.y, b.y, d1[k]);
        d2[k] = fmaf(a.z, b.z, d2[k]);
        d3[k] = fmaf(a.w, b.w, d3[k]);
      }
    }
    float pj[TQ];
    int nvalid[TQ], most = 0;
#pragma unroll
    for (int k = 0; k < TQ; ++k) {
      pj[k] = 0.0f;
      nvalid[k] = static_cast<int>(max(int64_t{0}, min(end[k] - j0, int64_t{kTile})));
      most = max(most, nvalid[k]);
      if (nvalid[k] == 0) continue;  // the same for the whole warp
      const bool valid = lane < nvalid[k];
      const float s = valid ? ((d0[k] + d1[k]) + (d2[k] + d3[k])) * p.scale : -INFINITY;
      const float m_new = fmaxf(m_run[k], warp_max(s));
      pj[k] = valid ? expf(s - m_new) : 0.0f;
      const float alpha = expf(m_run[k] - m_new);
      l_run[k] = l_run[k] * alpha + warp_sum(pj[k]);
      m_run[k] = m_new;
#pragma unroll
      for (int i = 0; i < kMaxDimsPerLane; ++i) acc[k][i] *= alpha;
    }
    for (int j = 0; j < most; ++j) {
      const float* vr = vt + j * hd;
      float v[kMaxDimsPerLane];
#pragma unroll
      for (int i = 0; i < kMaxDimsPerLane; ++i) {
        const int64_t d = lane + 32 * i;
        v[i] = d < hd ? vr[d] : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < TQ; ++k) {
        if (j >= nvalid[k]) continue;  // the same for the whole warp
        const float w = __shfl_sync(0xffffffffu, pj[k], j);
#pragma unroll
        for (int i = 0; i < kMaxDimsPerLane; ++i) {
          if (lane + 32 * i < hd) acc[k][i] = fmaf(w, v[i], acc[k][i]);
        }
      }
    }
    __syncthreads();  // the slot is refilled next
    if (p.stages == 1 && it + 1 < ntiles) load_tile(j0 + kTile, 0);
  }
#pragma unroll
  for (int k = 0; k < TQ; ++k) {
    if (end[k] <= begin) continue;
    float* out =
        p.partial + (((t0 + k - p.t_begin) * p.heads + h) * p.max_splits + split) * (hd + 2);
#pragma unroll
    for (int i = 0; i < kMaxDimsPerLane; ++i) {
      const int64_t d = lane + 32 * i;
      if (d < hd) out[d] = acc[k][i];
    }
    if (lane == 0) {
      out[hd] = m_run[k];
      out[hd + 1] = l_run[k];
    }
  }
}

// Where each sequence's token blocks start among a launch's blocks (one CTA, a running sum).
__global__ void attention_blocks_kernel(const int32_t* seq_start, int S, int64_t t0, int64_t n,
                                        int qb, int32_t* block_start) {
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

// One warp per (token, head): merges the token's splits in order and normalises.
__global__ void attention_merge_kernel(const float* partial, const int32_t* pos, int64_t t_begin,
                                       int64_t tokens, int64_t heads, int64_t hd, int max_splits,
                                       float* out, int64_t ldo) {
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= tokens * heads) return;
  const int64_t tl = w / heads, h = w % heads, t = t_begin + tl;
  const int n = static_cast<int>(pos[t] / kSplit) + 1;
  const float* base = partial + (tl * heads + h) * max_splits * (hd + 2);
  float o[kMaxDimsPerLane];
  float M = base[hd], L = base[hd + 1];
#pragma unroll
  for (int i = 0; i < kMaxDimsPerLane; ++i) o[i] = lane + 32 * i < hd ? base[lane + 32 * i] : 0.0f;
  for (int s = 1; s < n; ++s) {
    const float* ps = base + s * (hd + 2);
    const float ms = ps[hd], ls = ps[hd + 1];
    const float Mn = fmaxf(M, ms), a = expf(M - Mn), b = expf(ms - Mn);
    L = L * a + ls * b;
#pragma unroll
    for (int i = 0; i < kMaxDimsPerLane; ++i) {
      if (lane + 32 * i < hd) o[i] = fmaf(ps[lane + 32 * i], b, o[i] * a);
    }
    M = Mn;
  }
  const float inv = 1.0f / L;
#pragma unroll
  for (int i = 0; i < kMaxDimsPerLane; ++i) {
    const int64_t d = lane + 32 * i;
    if (d < hd) out[t * ldo + h * hd + d] = o[i] * inv;
  }
}

}  // namespace

void store_kv(const Tensor& k, const Tensor& v, Tensor k_pages, Tensor v_pages,
              const BatchLayout& layout) {
  const int64_t kv_heads = k_pages.shape[1], page = k_pages.shape[2], hd = k_pages.shape[3];
  check(page == layout.page_size, ErrorKind::internal, "store_kv: page size mismatch");
  check(k.shape[1] == kv_heads * hd && v.shape[1] == kv_heads * hd, ErrorKind::internal,
        "store_kv: k/v width");
  const int64_t n = layout.num_tokens * kv_heads * hd;
  if (n == 0) return;
  store_kv_kernel<<<blocks_for(n, 256), 256, 0, stream()>>>(
      k.ptr<float>(), ld(k), v.ptr<float>(), ld(v), k_pages.ptr<float>(), v_pages.ptr<float>(),
      layout.kv_slot.ptr<int32_t>(), layout.num_tokens, kv_heads, page, hd);
  launched("store_kv_kernel");
}

void attention(const Tensor& q, int64_t heads, const Tensor& k_pages, const Tensor& v_pages,
               float scale, const BatchLayout& layout, Tensor out) {
  const int64_t kv_heads = k_pages.shape[1], page = k_pages.shape[2], hd = k_pages.shape[3];
  check(heads % kv_heads == 0, ErrorKind::internal, "attention: heads not a multiple of kv heads");
  const int64_t group = heads / kv_heads;
  check(group <= 32, ErrorKind::unsupported,
        "CUDA attention: more than 32 query heads per KV head");
  check(hd <= 32 * kMaxDimsPerLane && hd % 4 == 0, ErrorKind::unsupported,
        "CUDA attention: head_dim must be a multiple of 4, at most 256");
  const int64_t T = layout.num_tokens;
  if (T == 0) return;
  const int max_splits = static_cast<int>((layout.max_pages * page + kSplit - 1) / kSplit);
  // Prefill (some sequence has several tokens here): CTAs of up to 8 tokens (two warps of four
  // per query head) where shared memory allows. Decode: one token per CTA.
  struct Shape {
    int tq, warps_per_head;
  };
  const bool blocks = T > layout.num_seqs;
  auto smem_for = [&](int stages, Shape sh) {
    return (stages * kTile * (2 * hd + 4) + group * sh.warps_per_head * sh.tq * hd) * sizeof(float);
  };
  static const int smem_optin = [] {
    int dev = 0, v = 0;
    HIBANA_CUDA(cudaGetDevice(&dev));
    HIBANA_CUDA(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    for (auto* k : {attention_split_kernel<1>, attention_split_kernel<4>})
      HIBANA_CUDA(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, v));
    return v;
  }();
  // The most threads a CTA of each variant can have with its registers.
  static const std::array<int, 2> max_threads = [] {
    cudaFuncAttributes a1{}, a4{};
    HIBANA_CUDA(cudaFuncGetAttributes(&a1, attention_split_kernel<1>));
    HIBANA_CUDA(cudaFuncGetAttributes(&a4, attention_split_kernel<4>));
    return std::array<int, 2>{a1.maxThreadsPerBlock, a4.maxThreadsPerBlock};
  }();
  // The first shape and depth that fits: two K/V tiles in flight before more tokens per CTA.
  const size_t limit = static_cast<size_t>(smem_optin);
  Shape sh{1, 1};
  int stages = 0;
  for (int st : {2, 1}) {
    for (Shape c : {Shape{4, 2}, Shape{4, 1}, Shape{1, 1}}) {
      const int threads = static_cast<int>(group) * c.warps_per_head * 32;
      if ((c.tq > 1 && !blocks) || threads > max_threads[c.tq > 1] || smem_for(st, c) > limit)
        continue;
      sh = c;
      stages = st;
      break;
    }
    if (stages > 0) break;
  }
  check(stages > 0, ErrorKind::unsupported,
        "CUDA attention: head_dim and GQA group need more shared memory than this GPU has");
  const size_t smem = smem_for(stages, sh);
  // Prefill takes the register-tiled kernel where it has a variant for this head_dim and group.
  const int tiled_qb = blocks ? tiled_block_tokens(hd, group) : 0;
  const int qb = tiled_qb > 0 ? tiled_qb : sh.tq * sh.warps_per_head;
  // Tokens per launch: bounded so the split partials stay under 256 MiB.
  const size_t per_token = static_cast<size_t>(heads * max_splits * (hd + 2)) * sizeof(float);
  const int64_t chunk =
      std::clamp<int64_t>(static_cast<int64_t>((size_t(256) << 20) / per_token), 1, T);
  Scratch partial(static_cast<size_t>(chunk) * per_token);
  const int S = static_cast<int>(layout.num_seqs);
  std::unique_ptr<Scratch> block_start;
  if (qb > 1) block_start = std::make_unique<Scratch>((S + 1) * sizeof(int32_t));
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t n = std::min(chunk, T - t0);
    AttnParams p{q.ptr<float>(),
                 ld(q),
                 k_pages.ptr<float>(),
                 v_pages.ptr<float>(),
                 layout.positions.ptr<int32_t>(),
                 layout.token_seq.ptr<int32_t>(),
                 layout.page_table.ptr<int32_t>(),
                 layout.max_pages,
                 page,
                 kv_heads,
                 heads,
                 hd,
                 scale,
                 t0,
                 n,
                 max_splits,
                 stages,
                 static_cast<int>(group),
                 nullptr,
                 layout.seq_start.ptr<int32_t>(),
                 S,
                 qb,
                 partial.as<float>()};
    int64_t ctas = n;
    if (qb > 1) {
      p.block_start = block_start->as<int32_t>();
      attention_blocks_kernel<<<1, 1024, 0, stream()>>>(p.seq_start, S, t0, n, qb,
                                                        block_start->as<int32_t>());
      launched("attention_blocks_kernel");
      ctas = (n + qb - 1) / qb + S;  // at most one partial block per sequence
    }
    dim3 grid(static_cast<unsigned>(ctas), static_cast<unsigned>(kv_heads),
              static_cast<unsigned>(max_splits));
    const unsigned threads = static_cast<unsigned>(group * sh.warps_per_head * 32);
    if (tiled_qb > 0) {
      tiled_launch(p, ctas);
    } else if (sh.tq == 4) {
      attention_split_kernel<4><<<grid, threads, smem, stream()>>>(p);
    } else {
      attention_split_kernel<1><<<grid, threads, smem, stream()>>>(p);
    }
    if (tiled_qb == 0) launched("attention_split_kernel");
    attention_merge_kernel<<<blocks_for(n * heads * 32, 256), 256, 0, stream()>>>(
        partial.as<float>(), layout.positions.ptr<int32_t>(), t0, n, heads, hd, max_splits,
        out.ptr<float>(), ld(out));
    launched("attention_merge_kernel");
  }
}

}  // namespace hibana::cuda
