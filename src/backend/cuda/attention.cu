// Paged KV storage and causal GQA attention on CUDA.
//
// A token's keys are cut into fixed splits of kSplit absolute positions (128; 64 or 32 with
// HIBANA_CUDA_ATTENTION_SPLIT, a benchmark knob that changes the bits). One CTA per (token,
// KV head, split) runs an online softmax over its split, one warp per query head of the group
// (per two heads in groups of 8 or more), sharing each 32-key tile of K and V through shared
// memory (prefill: blocks of tokens per CTA, attention_tiled.cu); a second kernel merges the
// splits of each (token, head) in split order.
// Split boundaries depend only on positions, so a token's output does not depend on the batch
// it came in or on how its prompt was chunked.
#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>

#include "backend/cuda/attention_impl.h"
#include "backend/cuda/ops.h"

namespace hibana::cuda {

namespace {

using namespace attn;

__global__ void store_kv_kernel(const float* k, int64_t ldk, const float* v, int64_t ldv, float* kp,
                                float* vp, const int32_t* slots, int64_t T, int64_t kv_heads,
                                int64_t page, int64_t hd) {
  pdl_start();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * kv_heads * hd) return;
  const int64_t t = i / (kv_heads * hd), h = (i / hd) % kv_heads, d = i % hd;
  // Both values loaded with the slot, before either store (kp may alias v for the compiler).
  const int64_t slot = slots[t];
  const float kv = k[t * ldk + h * hd + d], vv = v[t * ldv + h * hd + d];
  if (slot < 0) return;  // a padding row of a captured decode batch: nothing to store
  const int64_t pg = slot / page, off = slot % page;
  const int64_t dst = ((pg * kv_heads + h) * page + off) * hd + d;
  kp[dst] = kv;
  vp[dst] = vv;
}

// The value dimensions a lane owns. For a head_dim known at compile time (HD: 64, 128, 256)
// runs of kVec consecutive dimensions, read from shared memory as one vector: dimension
// r * 32 * kVec + lane * kVec + c for run r and component c (a warp's vector loads of one row
// are contiguous, so free of bank conflicts). For a run-time head_dim (HD = 0) single
// dimensions lane + 32 * r. Which lane adds which dimension changes nothing in the arithmetic:
// each dimension's sum is the same chain of fmaf over the keys in order.
template <int HD>
struct ValueLanes {
  static constexpr int kVec = HD == 0 ? 1 : (HD / 32 < 4 ? HD / 32 : 4);
  static constexpr int kRuns = HD == 0 ? kMaxDimsPerLane : HD / (32 * kVec);
  static_assert(HD == 0 || (HD % (32 * kVec) == 0 && (kVec == 2 || kVec == 4)),
                "head_dim variants: 64, 128, 256");
  static __device__ __forceinline__ int dim(int r, int c, int lane) {
    return HD == 0 ? lane + 32 * r : r * 32 * kVec + lane * kVec + c;
  }
};

// Adds w times row vr (one key's values) into the lane's sums, for a run-time head_dim: lane
// l's dimensions l, l + 32, ... (the compiled head_dims: add_value_rows).
__device__ __forceinline__ void add_value_row(float w, const float* vr, int hd, int lane,
                                              float* acc) {
#pragma unroll
  for (int i = 0; i < kMaxDimsPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) acc[i] = fmaf(w, vr[d], acc[i]);
  }
}

// Four partial dot products over the dimensions d = i (mod 4), ascending, added as
// (d0 + d1) + (d2 + d3): attention_tiled.cu's order, every kernel's.
struct Dot4 {
  float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
  __device__ __forceinline__ void add(const float4& a, const float4& b) {
    d0 = fmaf(a.x, b.x, d0);
    d1 = fmaf(a.y, b.y, d1);
    d2 = fmaf(a.z, b.z, d2);
    d3 = fmaf(a.w, b.w, d3);
  }
  __device__ __forceinline__ float sum() const { return (d0 + d1) + (d2 + d3); }
};

// One key's score against the warp's query (both rows in shared memory, 16-byte aligned), for
// a run-time head_dim (the compiled ones: key_scores).
__device__ __forceinline__ float key_score(const float* q, const float* k, int hd) {
  const float4* qr = reinterpret_cast<const float4*>(q);
  const float4* kr = reinterpret_cast<const float4*>(k);
  Dot4 dot;
#pragma unroll 8
  for (int d = 0; d < hd / 4; ++d) dot.add(qr[d], kr[d]);
  return dot.sum();
}

// Adds w[h] times row vr (one key's values) into head h's sums, h < kH, the row read once, for
// a compiled head_dim: lane l's runs of kVec dimensions (ValueLanes).
template <int HD, int kH, int kAcc>
__device__ __forceinline__ void add_value_rows(const float (&w)[kH], const float* vr, int lane,
                                               float (&acc)[kH][kAcc]) {
  using L = ValueLanes<HD>;
  static_assert(HD > 0 && kAcc == L::kRuns * L::kVec, "compiled head_dims");
#pragma unroll
  for (int r = 0; r < L::kRuns; ++r) {
    float v[L::kVec];
    if constexpr (L::kVec == 4) {
      const float4 f = *reinterpret_cast<const float4*>(vr + L::dim(r, 0, lane));
      v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    } else {
      const float2 f = *reinterpret_cast<const float2*>(vr + L::dim(r, 0, lane));
      v[0] = f.x, v[1] = f.y;
    }
#pragma unroll
    for (int hh = 0; hh < kH; ++hh) {
#pragma unroll
      for (int c = 0; c < L::kVec; ++c) {
        acc[hh][L::kVec * r + c] = fmaf(w[hh], v[c], acc[hh][L::kVec * r + c]);
      }
    }
  }
}

// One key's scores against kH queries (rows HD apart), the key's row read once, for a compiled
// head_dim (fully unrolled): key_score's arithmetic for each.
template <int HD, int kH>
__device__ __forceinline__ void key_scores(const float* q, const float* k, float (&s)[kH]) {
  static_assert(HD > 0, "compiled head_dims");
  const float4* kr = reinterpret_cast<const float4*>(k);
  Dot4 dot[kH];
#pragma unroll
  for (int i = 0; i < HD / 4; ++i) {
    const float4 b = kr[i];
#pragma unroll
    for (int hh = 0; hh < kH; ++hh) dot[hh].add(reinterpret_cast<const float4*>(q + hh * HD)[i], b);
  }
#pragma unroll
  for (int hh = 0; hh < kH; ++hh) s[hh] = dot[hh].sum();
}

// Decode, and prefill shapes the tiled kernel has no variant for: CTA = (token, KV head,
// split), one warp per kH query heads of the group, S tiles of K and V in flight.
// attention_tiled.cu repeats this arithmetic exactly for blocks of tokens. HD is the head_dim
// where it is one of the compiled variants (the copies' index arithmetic becomes shifts, the
// score loop unrolls, the value rows are read as vectors), 0 for any other multiple of 4. kH:
// 2 for a compiled head_dim and a group of 8 or more (below: each K and V row read from shared
// memory once for both heads, half the reads; each head's arithmetic unchanged), else 1. (Four
// heads a warp at head_dim 256, two warps a CTA, measured 0.975, and were not kept.)
template <int S, int HD, int kH = 1>
__global__ void attention_split_kernel(AttnParams p) {
  using L = ValueLanes<HD>;
  static_assert(kH == 1 || HD > 0, "several heads a warp: compiled head_dims");
  pdl_start();
  const int64_t t = p.t_begin + blockIdx.x;
  const int kvh = blockIdx.y;
  const int split = blockIdx.z;
  const int qpos = p.pos[t];
  const int64_t seq = p.token_seq[t];  // loaded with the position, not after it
  const int begin = split * p.split;
  if (begin > qpos) return;
  const int end = min(qpos + 1, begin + p.split);
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warps * kH;
  const int hd = HD > 0 ? HD : static_cast<int>(p.hd);
  const int h = kvh * group + warp * kH;  // the warp's first head
  const int page = static_cast<int>(p.page);
  const int32_t* pages = p.table + seq * p.max_pages;

  // K rows padded to hd + 4 floats: 16-byte aligned, and a quarter-warp's float4 reads of 8
  // consecutive keys hit distinct banks. S tiles of K and V are in flight (cp.async): the next
  // ones load while this one is used.
  // 128-byte aligned for its cp.async copies (gemv_kernel.cuh says why).
  extern __shared__ __align__(128) float sm[];
  const int kstride = kTile * (hd + 4), vstride = kTile * hd;
  float* ks = sm;                // [S][kTile][hd + 4]
  float* vs = ks + S * kstride;  // [S][kTile][hd]
  float* qs = vs + S * vstride;  // [group][hd]

  // Lane l of each warp finds the row (in units of hd floats: below 2^31, checked) where key
  // l of each of the split's tiles starts — one page lookup and one 32-bit division per key,
  // all issued at the start (a tile's copies then wait on no load); a copy takes its key's row
  // from that lane.
  static_assert(kTile == 32 && kSplit % kTile == 0, "one key per lane");
  constexpr int kTilesPerSplit = kSplit / kTile;  // at most (shorter splits: pl >= end)
  int key_rows[kTilesPerSplit];
#pragma unroll
  for (int i = 0; i < kTilesPerSplit; ++i) {
    const int pl = begin + i * kTile + lane;
    key_rows[i] = pl < end ? kv_row(pages, pl, page, static_cast<int>(p.kv_heads), kvh) : -1;
  }
  for (int d = lane; d < kH * hd; d += 32) qs[warp * kH * hd + d] = p.q[t * p.ldq + h * hd + d];

  auto load_tile = [&](int it, int slot) {
    float* kd = ks + slot * kstride;
    float* vd = vs + slot * vstride;
    int key_row = key_rows[0];  // (selected, not indexed: the array stays in registers)
#pragma unroll
    for (int i = 1; i < kTilesPerSplit; ++i) key_row = it == i ? key_rows[i] : key_row;
    if constexpr (HD > 0) {
      // kLanes lanes copy a key's K and V rows, kCopies float4s each; a warp's step covers
      // 32 / kLanes keys, the warps take steps in turn (every lane of a warp runs the same
      // steps: the shuffles see the whole warp).
      constexpr int kQ4 = HD / 4, kLanes = kQ4 < 32 ? kQ4 : 32, kCopies = kQ4 / kLanes;
      constexpr int kKeysPerStep = 32 / kLanes;
      for (int j0 = warp * kKeysPerStep; j0 < kTile; j0 += warps * kKeysPerStep) {
        const int j = j0 + lane / kLanes;
        const int row = __shfl_sync(0xffffffffu, key_row, j);
        const bool ok = row >= 0;
        const int64_t src = ok ? static_cast<int64_t>(row) * HD : 0;
#pragma unroll
        for (int c = 0; c < kCopies; ++c) {
          const int d = (c * kLanes + lane % kLanes) * 4;
          cp_async16(kd + j * (HD + 4) + d, p.kp + src + d, ok);
          cp_async16(vd + j * HD + d, p.vp + src + d, ok);
        }
      }
    } else {
      // Four values per copy (hd % 4 == 0, checked). A warp's copies are all in the loop or
      // all out of it (kTile * q4 is a multiple of 32).
      const int q4 = hd / 4;
      for (int idx = threadIdx.x; idx < kTile * q4; idx += blockDim.x) {
        const int j = idx / q4, d = (idx % q4) * 4;
        const int row = __shfl_sync(0xffffffffu, key_row, j);
        const bool ok = row >= 0;
        const int64_t src = ok ? static_cast<int64_t>(row) * hd + d : 0;
        cp_async16(kd + j * (hd + 4) + d, p.kp + src, ok);
        cp_async16(vd + j * hd + d, p.vp + src, ok);
      }
    }
  };

  constexpr int kAcc = HD == 0 ? kMaxDimsPerLane : L::kRuns * L::kVec;
  float acc[kH][kAcc];
  float m_run[kH], l_run[kH];
#pragma unroll
  for (int hh = 0; hh < kH; ++hh) {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[hh][i] = 0.0f;
    m_run[hh] = -INFINITY;
    l_run[hh] = 0.0f;
  }
  const int ntiles = (end - begin + kTile - 1) / kTile;
  for (int it = 0; it < S - 1; ++it) {
    if (it < ntiles) load_tile(it, it);
    cp_async_commit();
  }
  for (int it = 0; it < ntiles; ++it) {
    const int j0 = begin + it * kTile;
    // Into the slot the previous tile used (every warp is past it: the barrier below).
    if (it + S - 1 < ntiles) load_tile(it + S - 1, (it + S - 1) % S);
    cp_async_commit();
    cp_async_wait<S - 1>();
    __syncthreads();
    const int slot = it % S;
    const float* kt = ks + slot * kstride;
    const float* vt = vs + slot * vstride;
    const bool valid = j0 + lane < end;
    float s[kH], pj[kH];
    if constexpr (HD == 0) {
      s[0] = key_score(qs + warp * hd, kt + lane * (hd + 4), hd);
    } else {
      key_scores<HD, kH>(qs + warp * kH * hd, kt + lane * (hd + 4), s);
    }
#pragma unroll
    for (int hh = 0; hh < kH; ++hh) {
      s[hh] = valid ? s[hh] * p.scale : -INFINITY;
      const float m_new = fmaxf(m_run[hh], warp_max(s[hh]));
      pj[hh] = valid ? expf(s[hh] - m_new) : 0.0f;
      const float alpha = expf(m_run[hh] - m_new);
      l_run[hh] = l_run[hh] * alpha + warp_sum(pj[hh]);
      m_run[hh] = m_new;
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[hh][i] *= alpha;
    }
    auto add_row = [&](int j) {
      if constexpr (HD == 0) {
        add_value_row(__shfl_sync(0xffffffffu, pj[0], j), vt + j * hd, hd, lane, acc[0]);
      } else {
        float w[kH];
#pragma unroll
        for (int hh = 0; hh < kH; ++hh) w[hh] = __shfl_sync(0xffffffffu, pj[hh], j);
        add_value_rows<HD, kH, kAcc>(w, vt + j * hd, lane, acc);
      }
    };
    const int nvalid = min(end - j0, kTile);
    if (nvalid == kTile) {  // a full tile: every key's row, unrolled
#pragma unroll 8
      for (int j = 0; j < kTile; ++j) add_row(j);
    } else {
#pragma unroll 4
      for (int j = 0; j < nvalid; ++j) add_row(j);
    }
    __syncthreads();  // the slot is refilled next
  }
#pragma unroll
  for (int hh = 0; hh < kH; ++hh) {
    float* out =
        p.partial + (((t - p.t_begin) * p.heads + h + hh) * p.max_splits + split) * (hd + 2);
#pragma unroll
    for (int r = 0; r < kAcc / L::kVec; ++r) {
#pragma unroll
      for (int c = 0; c < L::kVec; ++c) {
        const int d = L::dim(r, c, lane);
        if (HD > 0 || d < hd) out[d] = acc[hh][r * L::kVec + c];
      }
    }
    if (lane == 0) {
      out[hd] = m_run[hh];
      out[hd + 1] = l_run[hh];
    }
  }
}

// One warp per (token, head, 32 dimensions): the largest of the splits' maxima first (exact
// in any order), then every split's values scaled to it and added in split order, normalised at
// the end. Each lane owns one dimension (an output element's operations are those of any other
// split of the dimensions among warps). Splits are taken 32 at a time: lane l loads split
// s0 + l's max and sum, and every lane its dimension's values of the 32 splits, all at once, so
// up to 32 splits (4k positions at 128 a split) the merge is one round trip, with one more for
// the maxima beyond that and one for each further 32. Lane l's split's scale expf(m - M)
// reaches the other lanes by shuffle; its share of the sum is added over the warp at the end.
// With a gate ([T, heads * hd], ldg apart: the gated attention's output gate) the output is
// also multiplied by sigmoid(gate) (mul_sigmoid's arithmetic).
__global__ void attention_merge_kernel(const float* partial, const int32_t* pos, int64_t t_begin,
                                       int64_t tokens, int64_t heads, int64_t hd, int max_splits,
                                       int split, float* out, int64_t ldo, const float* gate,
                                       int64_t ldg) {
  constexpr int kChunk = 32;
  // The warp's (token, head, dimensions) before the wait: 64-bit divisions, long emulated
  // sequences that would otherwise sit on the decode chain after it.
  const int64_t groups = (hd + 31) / 32;
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t th = w / groups, tl = th / heads, h = th % heads, t = t_begin + tl;
  const int64_t d = (w % groups) * 32 + lane;
  const int pitch = static_cast<int>(hd) + 2;
  pdl_start();
  if (w >= tokens * heads * groups) return;
  const int n = (pos[t] >> (__ffs(split) - 1)) + 1;  // (split: a power of two)
  const float* base = partial + (tl * heads + h) * max_splits * pitch;
  const int64_t dd = d < hd ? d : hd - 1;  // (lanes past hd load a valid address, store nothing)
  const float gv = gate ? gate[t * ldg + h * hd + dd] : 0.0f;  // (loaded with the partials)
  // A chunk's loads: lane l's split s0 + l (its max and sum) and the lane's dimension of the
  // chunk's 32 splits, all at once (splits past n load nothing and count nothing).
  float mv = -INFINITY, lv = 0.0f, ov[kChunk];
  auto load = [&](int s0) {
    if (s0 + lane < n) {
      mv = base[(s0 + lane) * pitch + hd];
      lv = base[(s0 + lane) * pitch + hd + 1];
    }
    const float* col = base + s0 * pitch + dd;
#pragma unroll
    for (int q = 0; q < kChunk; ++q) ov[q] = s0 + q < n ? col[q * pitch] : 0.0f;
  };
  load(0);
  // The maxima beyond the first chunk (one more round trip each 32), then the first chunk's.
  float M = -INFINITY;
  for (int s = kChunk + lane; s < n; s += 32) M = fmaxf(M, base[s * pitch + hd]);
  M = warp_max(fmaxf(M, mv));
  float o = 0.0f, l_part = 0.0f;
  for (int s0 = 0; s0 < n; s0 += kChunk) {
    if (s0 > 0) load(s0);
    const bool mine = s0 + lane < n;
    const float b = mine ? expf(mv - M) : 0.0f;
    if (mine) l_part = fmaf(lv, b, l_part);
#pragma unroll
    for (int q = 0; q < kChunk; ++q) {
      if (s0 + q < n) o = fmaf(ov[q], __shfl_sync(0xffffffffu, b, q), o);  // (warp-uniform)
    }
  }
  const float L = warp_sum(l_part);
  if (d < hd) {
    const float v = o * (1.0f / L);
    out[t * ldo + h * hd + d] = gate ? mul_sigmoid_f(v, gv) : v;
  }
}

using SplitKernel = void (*)(AttnParams);

// The per-token kernel for `stages` tiles in flight, this head_dim and query heads a warp:
// the compiled variants for head_dim 64, 128 and 256 with 2 or 3 stages, with one or two heads
// a warp; the run-time head_dim kernel otherwise, with one. Null where no kernel takes
// `heads_per_warp` heads.
SplitKernel split_kernel(int stages, int64_t hd, int heads_per_warp) {
  auto fixed = [hd, heads_per_warp](auto s) -> SplitKernel {
    constexpr int S = decltype(s)::value;
    auto pick = [heads_per_warp](auto one, auto two) -> SplitKernel {
      return heads_per_warp == 1 ? one : heads_per_warp == 2 ? two : nullptr;
    };
    switch (hd) {
      case 64:
        return pick(attention_split_kernel<S, 64>, attention_split_kernel<S, 64, 2>);
      case 128:
        return pick(attention_split_kernel<S, 128>, attention_split_kernel<S, 128, 2>);
      case 256:
        return pick(attention_split_kernel<S, 256>, attention_split_kernel<S, 256, 2>);
      default:
        return heads_per_warp == 1 ? attention_split_kernel<S, 0> : nullptr;
    }
  };
  if (stages >= 3) return fixed(std::integral_constant<int, 3>{});
  if (stages == 2) return fixed(std::integral_constant<int, 2>{});
  return heads_per_warp == 1 ? attention_split_kernel<1, 0> : nullptr;
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
  launch_pdl(store_kv_kernel, blocks_for(n, 256), 256, 0, k.ptr<float>(), ld(k), v.ptr<float>(),
             ld(v), k_pages.ptr<float>(), v_pages.ptr<float>(), layout.kv_slot.ptr<int32_t>(),
             layout.num_tokens, kv_heads, page, hd);
  launched("store_kv_kernel");
}

void attention(const Tensor& q, int64_t heads, const Tensor& k_pages, const Tensor& v_pages,
               float scale, const BatchLayout& layout, Tensor out, const Tensor* gate,
               const std::vector<Backend::RowRange>* prefill_rows) {
  const int64_t kv_heads = k_pages.shape[1], page = k_pages.shape[2], hd = k_pages.shape[3];
  check(!gate || (gate->shape[0] == out.shape[0] && gate->shape[1] == out.shape[1]),
        ErrorKind::internal, "attention: the gate must have the output's shape");
  check(heads % kv_heads == 0, ErrorKind::internal, "attention: heads not a multiple of kv heads");
  const int64_t group = heads / kv_heads;
  check(group <= 32, ErrorKind::unsupported,
        "CUDA attention: more than 32 query heads per KV head");
  check(hd <= 32 * kMaxDimsPerLane && hd % 4 == 0, ErrorKind::unsupported,
        "CUDA attention: head_dim must be a multiple of 4, at most 256");
  const int64_t T = layout.num_tokens;
  if (T == 0) return;
  // (Read at every launch; a recorded decode graph keeps the split it was recorded with, so
  // set it before the engine starts.)
  const int64_t asked = knob("HIBANA_CUDA_ATTENTION_SPLIT", kSplit);
  check(asked == 32 || asked == 64 || asked == kSplit, ErrorKind::invalid_argument,
        "HIBANA_CUDA_ATTENTION_SPLIT must be 32, 64 or 128");
  const int split = static_cast<int>(asked);
  const int max_splits = static_cast<int>((layout.max_pages * page + split - 1) / split);
  // Prefill (some sequence has several tokens here) takes the register-tiled kernel, in blocks
  // of qb tokens of one sequence, where it has a variant for this head_dim and group.
  const int qb = T > layout.num_seqs ? tiled_block_tokens(hd, group) : 0;
  // Per-token kernel: three K/V tiles in flight where the GPU's shared memory allows (it does on
  // sm_90 up to head_dim 256 with 16 query heads per KV head), fewer otherwise or where
  // HIBANA_CUDA_ATTENTION_STAGES asks for fewer (a benchmark knob, read at every launch; the
  // bits do not depend on it).
  auto smem_for = [&](int stages) {
    return (stages * kTile * (2 * hd + 4) + group * hd) * sizeof(float);
  };
  // Every variant may use the GPU's whole opt-in memory (once); how much a launch takes follows
  // smem_per_block(), which may be less.
  static const bool configured = [] {
    const int v = smem_optin();
    for (int stages = 1; stages <= 3; ++stages) {
      for (int64_t d : {0, 64, 128, 256}) {
        for (int heads_per_warp : {1, 2}) {
          if (SplitKernel k = split_kernel(stages, d, heads_per_warp)) {
            HIBANA_CUDA(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, v));
          }
        }
      }
    }
    return true;
  }();
  (void)configured;
  const int limit = smem_per_block();
  int stages = static_cast<int>(std::min<int64_t>(3, knob("HIBANA_CUDA_ATTENTION_STAGES", 3)));
  while (stages > 1 && smem_for(stages) > static_cast<size_t>(limit)) --stages;
  const size_t smem = smem_for(stages);
  check(smem <= static_cast<size_t>(limit), ErrorKind::unsupported,
        "CUDA attention: head_dim and GQA group need more shared memory than this GPU has");
  // The kernel finds a key's row in 32 bits (in units of head_dim floats).
  check(k_pages.shape[0] * kv_heads * page < (int64_t{1} << 31), ErrorKind::unsupported,
        "CUDA attention: more than 2^31 KV rows per layer");
  // Tokens per launch: bounded so the split partials stay under 256 MiB.
  const size_t per_token = static_cast<size_t>(heads * max_splits * (hd + 2)) * sizeof(float);
  const int64_t chunk =
      std::clamp<int64_t>(static_cast<int64_t>((size_t(256) << 20) / per_token), 1, T);
  Scratch partial(static_cast<size_t>(chunk) * per_token);
  const int S = static_cast<int>(layout.num_seqs);
  auto params = [&](int64_t t0, int64_t n) {
    AttnParams p{};
    p.q = q.ptr<float>();
    p.ldq = ld(q);
    p.kp = k_pages.ptr<float>();
    p.vp = v_pages.ptr<float>();
    p.pos = layout.positions.ptr<int32_t>();
    p.token_seq = layout.token_seq.ptr<int32_t>();
    p.table = layout.page_table.ptr<int32_t>();
    p.max_pages = layout.max_pages;
    p.page = page;
    p.kv_heads = kv_heads;
    p.heads = heads;
    p.hd = hd;
    p.scale = scale;
    p.t_begin = t0;
    p.t_count = n;
    p.max_splits = max_splits;
    p.split = split;
    p.group = static_cast<int>(group);
    p.seq_start = layout.seq_start.ptr<int32_t>();
    p.num_seqs = S;
    p.block_tokens = qb;
    p.partial = partial.as<float>();
    return p;
  };
  // Rows outside whole prefill blocks on tensor cores (attention_decode.cu), where it takes
  // them: every such row of the pass alike, so a token has the same bits decoded, verified or
  // prefilled in a partial block. Only in GdnMode::aligned_chunks (decode_mma_takes says which
  // shapes): a pass without prefill rows (GdnMode::recurrent, where any split of a prompt must
  // give the same bits; the MTP layer's) may be a whole prompt, whose keys the per-token kernel
  // would read once a token; it keeps the f32 kernels (the tiled one for long runs).
  const bool decode_mma =
      layout.gdn_mode == GdnMode::aligned_chunks && decode_mma_takes(params(0, T));
  std::unique_ptr<Scratch> block_start;  // (the tiled kernel's only)
  if (qb > 0 && !decode_mma) block_start = std::make_unique<Scratch>((S + 1) * sizeof(int32_t));
  // Rows [r0, r1) by the per-token (or tiled) kernels and the merge.
  auto split_rows = [&](int64_t r0, int64_t r1) {
    for (int64_t t0 = r0; t0 < r1; t0 += chunk) {
      const int64_t n = std::min(chunk, r1 - t0);
      const AttnParams p = params(t0, n);
      if (decode_mma) {
        decode_mma_launch(p);
      } else if (qb > 0) {
        tiled_launch(p, block_start->as<int32_t>());
      } else {
        dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(kv_heads),
                  static_cast<unsigned>(max_splits));
        // Two query heads a warp where the group is even and the head_dim compiled: by default
        // for groups of 8 or more, whose 8 warps each read every K and V row from shared memory
        // (the 80B's, 16 heads on 2: 1.015 at batch 1, 1.012 at 8; the 8B's group of 4: 1.001
        // and 0.992, H100, docs/benchmarks.md, twenty-sixth slice).
        // HIBANA_CUDA_ATTENTION_HEADS_PER_WARP 1: never, 2: for any even group (read at every
        // launch; the bits do not depend on it).
        const int64_t asked_per_warp = knob("HIBANA_CUDA_ATTENTION_HEADS_PER_WARP", 0);
        const bool two =
            group % 2 == 0 && (asked_per_warp == 2 || (asked_per_warp != 1 && group >= 8));
        SplitKernel kernel = two ? split_kernel(stages, hd, 2) : nullptr;  // (null: no variant)
        const int per_warp = kernel ? 2 : 1;
        if (!kernel) kernel = split_kernel(stages, hd, 1);
        launch_pdl(kernel, grid, static_cast<unsigned>(group / per_warp * 32), smem, p);
        launched("attention_split_kernel");
      }
      launch_pdl(attention_merge_kernel, blocks_for(n * heads * ((hd + 31) / 32) * 32, 256), 256, 0,
                 partial.as<float>(), layout.positions.ptr<int32_t>(), t0, n, heads, hd, max_splits,
                 split, out.ptr<float>(), ld(out), gate ? gate->ptr<float>() : nullptr,
                 gate ? ld(*gate) : int64_t{0});
      launched("attention_merge_kernel");
    }
  };
  const int terms = prefill_rows && !prefill_rows->empty() ? mma_attention_terms() : 0;
  if (terms == 0 || !mma_takes(hd, group, terms)) return split_rows(0, T);
  int64_t row = 0;
  for (const Backend::RowRange& r : *prefill_rows) {
    // (Whole blocks only: a range of another length is not the pass's prefill rows.)
    if ((r.end - r.begin) % Backend::kPrefillBlock != 0) continue;
    split_rows(row, r.begin);
    mma_launch(params(0, T), r.begin, r.end - r.begin, terms, out.ptr<float>(), ld(out),
               gate ? gate->ptr<float>() : nullptr, gate ? ld(*gate) : int64_t{0});
    row = r.end;
  }
  split_rows(row, T);
}

}  // namespace hibana::cuda
