// Per-token attention on tensor cores: every row of a pass outside whole prefill blocks (decode
// tokens, a verify pass's drafts, the rows of a prefill's last partial block) when
// HIBANA_CUDA_MMA_ATTENTION is 1, the default (one bf16 term of Q, K, the probabilities and V,
// as the prefill blocks take them, attention_mma.cu); HIBANA_CUDA_MMA_DECODE=0 leaves those rows
// to the f32 split kernels (attention.cu), as do head_dims other than 64, 128 and 256, groups of
// more than 8 query heads, GPUs whose shared memory is too small, and passes that may be a whole
// prompt without prefill rows (attention.cu says which).
//
// The split kernel it replaces spent ~60% of its time in its loop (ncu, H100, the 80B's decode
// at 4k positions: 4,100 instructions a warp, half of them FFMA, bound by shared-memory loads:
// every warp read every K and V row of a tile). Here a CTA still takes one (token, KV head,
// split) and writes the same partials for the same merge, but each of its 4 warps takes a
// quarter of the split's keys (32 of 128) alone, 16 keys a step, through a ring of its own:
//
// - scores S = Q · Kᵀ with m16n8k16: A = the group's queries (rows = heads, up to 8; rows 8-15
//   zero), B = Kᵀ, 8 keys an n-tile; a lane's A fragments (all of head_dim) stay in registers.
//   Within a k16 step the dimensions are permuted alike in Q and K (k slots 2t, 2t + 1, 2t + 8,
//   2t + 9 hold dimensions 16s + 4t .. 16s + 4t + 3), so a lane reads each key row as float4s.
// - the online softmax of head g over the step's keys in lanes (g, 0..3);
// - Oᵀ += Vᵀ · Pᵀ: A = Vᵀ (rows = dimensions: row g of m-tile i is dimension 16i + 2g, row g + 8
//   dimension 16i + 2g + 1, so a lane reads float2s), B = Pᵀ, whose fragment is the scores' C
//   fragment as it stands (keys 2t, 2t + 1 and 2t + 8, 2t + 9 of head g): no shuffle, no padding.
//
// Each K and V element is read from shared memory once, by one lane. At the end the 4 warps'
// (max, sum, output) are merged in warp order through shared memory into the split's partial.
// A row's bits depend on its position and its data only: the splits and each warp's keys are
// fixed by position, so a token has the same bits alone, in a batch or in any pass.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "backend/cuda/attention_impl.h"
#include "backend/cuda/mma_common.cuh"
#include "backend/cuda/ops.h"

namespace hibana::cuda::attn {

namespace {

template <int HD>
struct DecodeShape {
  static constexpr int kWarps = 4, kThreads = 32 * kWarps;
  static constexpr int kKeys = 16;          // keys a step (one k16 of P · V)
  static constexpr int kKPitch = HD + 16;   // floats a K row: LDS.128 of rows g, g + 1 apart
  static constexpr int kVPitch = HD + 4;    // floats a V row: LDS.64 of rows 2t apart
  static constexpr int kOPitch = HD + 4;    // floats a head's output row in the final merge
  static constexpr int kChunks = HD / 4;    // 16-byte copies a row
  static constexpr int kSlot = kKeys * kKPitch;  // floats a slot: one step's K or V
  static constexpr int kSlots = 3;               // a warp's: K0, V0, K1, then V1 where K0 was
  static constexpr size_t kSmem = size_t(kWarps) * kSlots * kSlot * sizeof(float);
  static constexpr int kMerge = 16 + 8 * kOPitch;  // floats a warp's max, sum and output
  static_assert(kKeys * kVPitch <= kSlot && kWarps * (kMerge + 8) <= kWarps * kSlots * kSlot,
                "slots");
  static_assert(kSplit / kWarps <= 2 * kKeys, "two steps a warp at most");
  static_assert(kChunks <= 32 ? 32 % kChunks == 0 : kChunks % 32 == 0, "a warp's copies");
};

__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  return mm::pack_bf16(lo, hi);
}

template <int HD>
__global__ void __launch_bounds__(DecodeShape<HD>::kThreads, 1) decode_mma_kernel(AttnParams p) {
  using S = DecodeShape<HD>;
  constexpr int KP = S::kKPitch, VP = S::kVPitch;
  extern __shared__ __align__(128) float sm[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t tok = p.t_begin + blockIdx.x;
  const int kvh = blockIdx.y, split = blockIdx.z;
  // The layout is the host's (copied in before the step's first kernel): read before the wait.
  const int qpos = p.pos[tok];
  const int64_t seq = p.token_seq[tok];
  const int begin = split * p.split;
  if (begin > qpos) {
    pdl_start();  // (a CTA that leaves still waits: the next kernel's wait covers the one before)
    return;
  }
  const int end = min(qpos + 1, begin + p.split);
  const int span = p.split / S::kWarps;  // keys a warp
  const int wbegin = begin + warp * span, wend = min(end, wbegin + span);
  const int steps = wend > wbegin ? (wend - wbegin + S::kKeys - 1) / S::kKeys : 0;
  const int32_t* pages = p.table + seq * p.max_pages;
  // Lane l: the row (in HD floats) of the warp's key l, or -1.
  const int key_row = wbegin + lane < wend ? kv_row(pages, wbegin + lane, static_cast<int>(p.page),
                                                    static_cast<int>(p.kv_heads), kvh)
                                           : -1;
  float* ring = sm + warp * S::kSlots * S::kSlot;
  const unsigned ring_s = static_cast<unsigned>(__cvta_generic_to_shared(ring));
  // Step st's K or V rows into `slot` (row pitch `pitch`), zeros for keys past the warp's: a
  // key's row is kLanes lanes' kCopies 16-byte copies, kKeysAPass keys a pass of the warp (one
  // shuffle and one 64-bit address a key, the rest immediate offsets).
  constexpr int kLanes = S::kChunks < 32 ? S::kChunks : 32, kCopies = S::kChunks / kLanes;
  constexpr int kKeysAPass = 32 / kLanes;
  auto copy = [&](int st, const float* src, int slot, int pitch) {
    const unsigned dst = ring_s + (slot * S::kSlot + (lane % kLanes) * 4) * 4;
    const float* from = src + (lane % kLanes) * 4;
#pragma unroll
    for (int i = 0; i < S::kKeys / kKeysAPass; ++i) {
      const int r = i * kKeysAPass + lane / kLanes;
      const int row = __shfl_sync(0xffffffffu, key_row, st * S::kKeys + r);
      const float* at = from + (row >= 0 ? static_cast<int64_t>(row) * HD : 0);
#pragma unroll
      for (int c = 0; c < kCopies; ++c) {
        cp_async16_stream_s(dst + (r * pitch + c * kLanes * 4) * 4, at + c * kLanes * 4, row >= 0);
      }
    }
    cp_async_commit();
  };

  float m_run = -INFINITY, l_run = 0.0f;  // head g's; l_run this lane's part
  float acc[HD / 16][4];                  // Oᵀ: m-tile i, dims 16i + 2g (+1), heads 2t (+1)
#pragma unroll
  for (int i = 0; i < HD / 16; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

  pdl_start();  // the query and the token's own key and value are the kernels before's
  if (steps > 0) {
    // Head g's query (loaded first: its round trip under the copies' issue), then as A
    // fragments (rows 8-15 zero): a0 dims 16s + 4t, +1; a2 +2, +3.
    const bool mine = g < p.group;
    const float* qr = p.q + tok * p.ldq + static_cast<int64_t>(kvh * p.group + (mine ? g : 0)) * HD;
    float4 qv[HD / 16];
#pragma unroll
    for (int s = 0; s < HD / 16; ++s) {
      qv[s] = mine ? *reinterpret_cast<const float4*>(qr + 16 * s + 4 * t)
                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    copy(0, p.kp, 0, KP);  // K0, V0 and K1 (or nothing) in flight
    copy(0, p.vp, 1, VP);
    if (steps > 1) {
      copy(1, p.kp, 2, KP);
    } else {
      cp_async_commit();
    }
    uint32_t qa[HD / 16][2];
#pragma unroll
    for (int s = 0; s < HD / 16; ++s) {
      qa[s][0] = pack(qv[s].x, qv[s].y);
      qa[s][1] = pack(qv[s].z, qv[s].w);
    }
    for (int st = 0; st < steps; ++st) {
      const int kslot = st == 0 ? 0 : 2, vslot = st == 0 ? 1 : 0;
      if (st == 0) {
        cp_async_wait<2>();  // K0 (V0 and K1 may be in flight)
      } else {
        cp_async_wait<1>();  // K1 (V1 may be)
      }
      __syncwarp();  // every lane's copies of the slot have landed
      // Scores of head g against keys 2t, 2t + 1 (n-tile 0) and 8 + 2t, 9 + 2t (n-tile 1): two
      // chains each (even and odd k16 steps), added at the end.
      float sc[2][2][4] = {};
      const float* kt = ring + kslot * S::kSlot + g * KP + 4 * t;
#pragma unroll
      for (int s = 0; s < HD / 16; ++s) {
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          const float4 k = *reinterpret_cast<const float4*>(kt + n * 8 * KP + 16 * s);
          mm::mma(sc[s % 2][n], qa[s][0], 0u, qa[s][1], 0u, pack(k.x, k.y), pack(k.z, k.w));
        }
      }
      __syncwarp();  // every lane is past K0's slot
      if (st == 0) {
        if (steps > 1) {
          copy(1, p.vp, 0, VP);
        } else {
          cp_async_commit();
        }
      }
      // The online softmax of head g (lanes 4g .. 4g + 3), keys past the warp's masked.
      const int kbase = wbegin + st * S::kKeys;
      float x[4], mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = kbase + n * 8 + 2 * t + e;
          const float s = sc[0][n][e] + sc[1][n][e];
          x[2 * n + e] = key < wend ? s * p.scale : -INFINITY;
          mx = fmaxf(mx, x[2 * n + e]);
        }
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_run, mx);  // (finite: key kbase is the warp's)
      const float alpha = expf(m_run - m_new);
      float pr[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) pr[i] = expf(x[i] - m_new);
      l_run = l_run * alpha + ((pr[0] + pr[1]) + (pr[2] + pr[3]));
      m_run = m_new;
      // Pᵀ's B fragment: keys 2t, 2t + 1 and 8 + 2t, 9 + 2t of head g.
      const uint32_t pb0 = pack(pr[0], pr[1]), pb1 = pack(pr[2], pr[3]);
      // The rescale of heads 2t and 2t + 1 (their lanes' alpha).
      const float a0 = __shfl_sync(0xffffffffu, alpha, 8 * t);
      const float a1 = __shfl_sync(0xffffffffu, alpha, 8 * t + 4);
      if (st == 0) {
        cp_async_wait<2>();  // V0 (K1 and V1 may be in flight)
      } else {
        cp_async_wait<0>();  // V1
      }
      __syncwarp();
      const float* vt = ring + vslot * S::kSlot + 2 * t * VP + 2 * g;
#pragma unroll
      for (int i = 0; i < HD / 16; ++i) {
        const float2 v0 = *reinterpret_cast<const float2*>(vt + 16 * i);
        const float2 v1 = *reinterpret_cast<const float2*>(vt + VP + 16 * i);
        const float2 v8 = *reinterpret_cast<const float2*>(vt + 8 * VP + 16 * i);
        const float2 v9 = *reinterpret_cast<const float2*>(vt + 9 * VP + 16 * i);
        acc[i][0] *= a0;
        acc[i][1] *= a1;
        acc[i][2] *= a0;
        acc[i][3] *= a1;
        mm::mma(acc[i], pack(v0.x, v1.x), pack(v0.y, v1.y), pack(v8.x, v9.x), pack(v8.y, v9.y),
                pb0, pb1);
      }
    }
  }
  l_run += __shfl_xor_sync(0xffffffffu, l_run, 1);
  l_run += __shfl_xor_sync(0xffffffffu, l_run, 2);

  // The warps' (max, sum, output) of each head, merged in warp order into the split's partial
  // (the merge kernel's input: the output relative to the max, the max, the sum).
  __syncthreads();  // every warp is past its ring
  float* mine = sm + warp * S::kMerge;  // max[8], sum[8], output[8][kOPitch]
  if (t == 0) {
    mine[g] = m_run;
    mine[8 + g] = l_run;
  }
#pragma unroll
  for (int i = 0; i < HD / 16; ++i) {
    float* o = mine + 16 + 16 * i + 2 * g;
    *reinterpret_cast<float2*>(o + 2 * t * S::kOPitch) = make_float2(acc[i][0], acc[i][2]);
    *reinterpret_cast<float2*>(o + (2 * t + 1) * S::kOPitch) = make_float2(acc[i][1], acc[i][3]);
  }
  __syncthreads();
  // Thread (w, h) of the first 32: warp w's scale of head h, expf(max - M) (a warp without keys:
  // max -inf, 0), over its own max; the split's max and sum of head h by thread (0, h).
  float* scales = sm + S::kWarps * S::kMerge;  // [kWarps][8]
  // Head h's partial of this split at base + h * head_pitch (HD outputs, the max, the sum).
  const int64_t head_pitch = p.max_splits * (HD + 2);
  float* base = p.partial +
                (((tok - p.t_begin) * p.heads + kvh * p.group) * p.max_splits + split) * (HD + 2);
  if (threadIdx.x < 32) {
    const int w = threadIdx.x / 8, h = threadIdx.x % 8;
    float M = -INFINITY;
#pragma unroll
    for (int v = 0; v < S::kWarps; ++v) M = fmaxf(M, sm[v * S::kMerge + h]);  // (warp 0's: finite)
    scales[w * 8 + h] = expf(sm[w * S::kMerge + h] - M);
    if (w == 0 && h < p.group) {
      float L = 0.0f;
#pragma unroll
      for (int v = 0; v < S::kWarps; ++v) {
        L = fmaf(sm[v * S::kMerge + 8 + h], expf(sm[v * S::kMerge + h] - M), L);
      }
      float* out = base + h * head_pitch;
      out[HD] = M;
      out[HD + 1] = L;
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < p.group * HD; idx += S::kThreads) {
    const int h = idx / HD, d = idx % HD;
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < S::kWarps; ++w) {
      o = fmaf(sm[w * S::kMerge + 16 + h * S::kOPitch + d], scales[w * 8 + h], o);
    }
    base[h * head_pitch + d] = o;
  }
}

using DecodeKernel = void (*)(AttnParams);

template <int HD>
DecodeKernel configured() {
  static const bool once = [] {
    HIBANA_CUDA(cudaFuncSetAttribute(decode_mma_kernel<HD>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     std::min(static_cast<int>(DecodeShape<HD>::kSmem),
                                              smem_optin())));
    return true;
  }();
  (void)once;
  return decode_mma_kernel<HD>;
}

// The kernel and its shared memory for this head_dim, or {nullptr, 0}.
std::pair<DecodeKernel, size_t> decode_variant(int64_t hd) {
  switch (hd) {
    case 64:
      return {configured<64>(), DecodeShape<64>::kSmem};
    case 128:
      return {configured<128>(), DecodeShape<128>::kSmem};
    case 256:
      return {configured<256>(), DecodeShape<256>::kSmem};
    default:
      return {nullptr, 0};
  }
}

}  // namespace

bool decode_mma_takes(const AttnParams& p) {
  if (mma_attention_terms() != 1 || !knob_on("HIBANA_CUDA_MMA_DECODE", true)) return false;
  // Only beside attention_mma.cu's kernel for whole blocks: a shape whose blocks it does not take
  // (a group of 5 or 6) runs whole prompts through the rows outside blocks.
  if (!mma_takes(p.hd, p.group, 1)) return false;
  if (p.group < 1 || p.group > 8 || p.ldq % 4 != 0 ||
      reinterpret_cast<uintptr_t>(p.q) % 16 != 0) {
    return false;
  }
  const auto [kernel, smem] = decode_variant(p.hd);
  return kernel && smem <= static_cast<size_t>(smem_per_block());
}

void decode_mma_launch(const AttnParams& p) {
  const auto [kernel, smem] = decode_variant(p.hd);
  check(kernel != nullptr, ErrorKind::internal, "decode attention: no kernel for this head_dim");
  const dim3 grid(static_cast<unsigned>(p.t_count), static_cast<unsigned>(p.kv_heads),
                  static_cast<unsigned>(p.max_splits));
  launch_pdl(kernel, grid, dim3(DecodeShape<64>::kThreads), smem, p);
  launched("attention_decode_mma_kernel");
}

}  // namespace hibana::cuda::attn
