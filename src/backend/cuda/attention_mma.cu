// Prefill attention on tensor cores for the rows of a pass's whole prefill blocks
// (Backend::set_prefill_rows): HIBANA_CUDA_MMA_ATTENTION=1 takes Q, K, the probabilities and V
// as one bf16 term each (the usual flash-attention arithmetic), =3 as two (x = h + l), each
// product as three mma (l·h, h·l, h·h: near f32); =0 turns it off. =1 is the default: the
// goldens hold with it and an 8k-token prefill's attention took a fifth of the split kernels'
// time (H100, docs/benchmarks.md, thirty-fifth slice). The other rows keep the split kernels'
// bits (attention.cu).
//
// FlashAttention-2's scheme with mma.sync m16n8k16: a CTA takes 16 consecutive tokens of one
// sequence and the G query heads of one KV head (a warp a head; for G < 4, 4 / G groups of 16
// tokens, so a CTA has 4 warps), Q split to bf16 in shared memory once, then every key tile
// from position 0 to the CTA's last token: K and V (f32 pages) split to bf16 in shared memory,
// the scores of the warp's 16 rows in registers, the running maximum and sum per row, the
// probabilities re-used as the A operand of P·V, the output rescaled per tile and divided by
// the sum at the end (then times sigmoid(gate) for a gated attention).
//
// A row's bits depend on its position and its data only: key tiles start at position 0 in
// fixed steps, a row's place in its warp is its position mod 16 (blocks are 64-aligned), and
// the keys a row may not see (past its position, or past the CTA's last token, zero-filled)
// score -inf, so they add exact zeros, and a tile with none for it rescales by exactly 1.
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/attention_impl.h"
#include "backend/cuda/mma_common.cuh"
#include "backend/cuda/ops.h"

namespace hibana::cuda::attn {

namespace {

template <int HD, int G, int kTerms>
struct MmaShape {
  static constexpr int kTokGroups = G >= 4 ? 1 : 4 / G;  // 16-token groups a CTA
  static constexpr int kWarps = G * kTokGroups;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kTokens = 16 * kTokGroups;
  static constexpr int kKeys = HD >= 256 ? 32 : 64;  // keys a tile
  static constexpr int kPitch = HD + 8;  // bf16 a shared-memory row (conflict-free ldmatrix)
  static constexpr int kPlanes = kTerms == 3 ? 2 : 1;  // h, and l
  static constexpr int kQRows = kWarps * 16;
  static constexpr int kQPlane = kQRows * kPitch, kKPlane = kKeys * kPitch;
  // The planes, then each key's row of a tile (int32: attention.cu checks rows below 2^31).
  static constexpr size_t kPlaneBytes = size_t(kPlanes) * (kQPlane + 2 * kKPlane) * 2;
  static constexpr size_t kSmem = kPlaneBytes + kKeys * sizeof(int32_t);
  static_assert(HD % 16 == 0 && kKeys % 16 == 0, "tile shapes");
};

// Four f32 values as their bf16 term h (and, with two planes, l = x - h rounded) at `at` of
// `base`'s first plane (and of the plane `plane` elements on).
template <int kPlanes>
__device__ __forceinline__ void store_terms(__nv_bfloat16* base, int plane, int at, float4 v) {
  const uint32_t h0 = mm::pack_bf16(v.x, v.y), h1 = mm::pack_bf16(v.z, v.w);
  *reinterpret_cast<uint2*>(base + at) = make_uint2(h0, h1);
  if constexpr (kPlanes == 2) {
    const uint32_t l0 = mm::pack_bf16(v.x - mm::low_of(h0), v.y - mm::high_of(h0));
    const uint32_t l1 = mm::pack_bf16(v.z - mm::low_of(h1), v.w - mm::high_of(h1));
    *reinterpret_cast<uint2*>(base + plane + at) = make_uint2(l0, l1);
  }
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// c += a · b over the terms: with two planes (h, l) of each, l·h, h·l, then h·h.
template <int kPlanes>
__device__ __forceinline__ void mma_add(float (&c)[4], const uint32_t (&a)[kPlanes][4],
                                        const uint32_t (&b)[kPlanes][4], int half) {
  const int i = 2 * half;
  if constexpr (kPlanes == 2) {
    mm::mma(c, a[1][0], a[1][1], a[1][2], a[1][3], b[0][i], b[0][i + 1]);
    mm::mma(c, a[0][0], a[0][1], a[0][2], a[0][3], b[1][i], b[1][i + 1]);
  }
  mm::mma(c, a[0][0], a[0][1], a[0][2], a[0][3], b[0][i], b[0][i + 1]);
}

struct MmaOut {
  float* out;
  int64_t ldo;
  const float* gate;  // null: none
  int64_t ldg;
  int64_t row0;  // the launch's first row (token of the pass)
};

template <int HD, int G, int kTerms>
__global__ void __launch_bounds__(MmaShape<HD, G, kTerms>::kThreads, 1)
    mma_attention_kernel(AttnParams p, MmaOut o) {
  using S = MmaShape<HD, G, kTerms>;
  constexpr int P = S::kPlanes;
  pdl_start();
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [P][kQRows][kPitch]
  __nv_bfloat16* ks = qs + P * S::kQPlane;                         // [P][kKeys][kPitch]
  __nv_bfloat16* vs = ks + P * S::kKPlane;                         // [P][kKeys][kPitch]
  int32_t* key_row = reinterpret_cast<int32_t*>(smem_raw + S::kPlaneBytes);  // [kKeys]
  static_assert(S::kThreads >= S::kKeys, "a key a thread");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t kvh = blockIdx.y;
  const int64_t tb = o.row0 + static_cast<int64_t>(blockIdx.x) * S::kTokens;
  const int64_t tw = tb + (warp / G) * 16;  // the warp's first token
  const int64_t head = kvh * G + warp % G;

  // Q: shared-memory row w * 16 + r is warp w's row r (token tw + r of its head).
  for (int i = threadIdx.x; i < S::kQRows * (HD / 4); i += S::kThreads) {
    const int r = i / (HD / 4), d = (i % (HD / 4)) * 4, w = r / 16;
    const float* src = p.q + (tb + (w / G) * 16 + r % 16) * p.ldq + (kvh * G + w % G) * HD + d;
    store_terms<P>(qs, S::kQPlane, r * S::kPitch + d, make_float4(src[0], src[1], src[2], src[3]));
  }
  const int32_t* pages = p.table + static_cast<int64_t>(p.token_seq[tb]) * p.max_pages;
  const int64_t end = static_cast<int64_t>(p.pos[tb + S::kTokens - 1]) + 1;  // keys [0, end)
  const int64_t prow[2] = {p.pos[tw + g], p.pos[tw + g + 8]};
  const float sl2 = p.scale * 1.4426950408889634f;  // scores in log2 units

  float oacc[HD / 8][4];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) oacc[n][0] = oacc[n][1] = oacc[n][2] = oacc[n][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};  // l_run: this lane's part
  const __nv_bfloat16* qw = qs + warp * 16 * S::kPitch;

  const int page = static_cast<int>(p.page), kv_heads = static_cast<int>(p.kv_heads);
  for (int64_t j0 = 0; j0 < end; j0 += S::kKeys) {
    __syncthreads();  // the last tile is read (the first time: nothing)
    // Each key's row (in HD floats), one page lookup and one 32-bit division a key, not one
    // 64-bit division and remainder a copy (HD / 4 of them a key).
    if (threadIdx.x < S::kKeys) {
      const int pj = static_cast<int>(j0) + static_cast<int>(threadIdx.x);
      key_row[threadIdx.x] =
          pj < end ? kv_row(pages, pj, page, kv_heads, static_cast<int>(kvh)) : -1;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < S::kKeys * (HD / 4); i += S::kThreads) {
      const int j = i / (HD / 4), d = (i % (HD / 4)) * 4;
      const int row = key_row[j];
      float4 kv = make_float4(0.0f, 0.0f, 0.0f, 0.0f), vv = kv;
      if (row >= 0) {
        const int64_t src = static_cast<int64_t>(row) * HD + d;
        kv = *reinterpret_cast<const float4*>(p.kp + src);
        vv = *reinterpret_cast<const float4*>(p.vp + src);
      }
      store_terms<P>(ks, S::kKPlane, j * S::kPitch + d, kv);
      store_terms<P>(vs, S::kKPlane, j * S::kPitch + d, vv);
    }
    __syncthreads();  // K and V (and, the first time, Q) are in shared memory

    // Scores of rows g and g + 8 against keys j0 + 8n + 2t (+1): sc[n][0..1], sc[n][2..3].
    float sc[S::kKeys / 8][4];
#pragma unroll
    for (int n = 0; n < S::kKeys / 8; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll 2
    for (int kk = 0; kk < HD / 16; ++kk) {
      uint32_t qa[P][4];
#pragma unroll
      for (int pl = 0; pl < P; ++pl) {
        mm::ldmatrix_x4(
            smem_addr(qw + pl * S::kQPlane + (lane % 16) * S::kPitch + kk * 16 + (lane / 16) * 8),
            qa[pl]);
      }
#pragma unroll
      for (int n0 = 0; n0 < S::kKeys; n0 += 16) {
        uint32_t kb[P][4];  // [0], [1]: keys n0.. ; [2], [3]: keys n0 + 8..
#pragma unroll
        for (int pl = 0; pl < P; ++pl) {
          mm::ldmatrix_x4(
              smem_addr(ks + pl * S::kKPlane + (n0 + lane % 8 + (lane / 16) * 8) * S::kPitch +
                        kk * 16 + ((lane / 8) % 2) * 8),
              kb[pl]);
        }
        mma_add<P>(sc[n0 / 8], qa, kb, 0);
        mma_add<P>(sc[n0 / 8 + 1], qa, kb, 1);
      }
    }

    // Online softmax: the tile's maximum of each row (over its quad), the rescale, the
    // probabilities (masked keys 0).
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < S::kKeys / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t key = j0 + n * 8 + 2 * t + (e & 1);
        const float s = key <= prow[e / 2] ? sc[n][e] * sl2 : -INFINITY;
        sc[n][e] = s;
        mx[e / 2] = fmaxf(mx[e / 2], s);
      }
    }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(m_run[r], mx[r]);  // (finite: key 0 is in every row's range)
      alpha[r] = exp2f(m_run[r] - m_new);
      m_run[r] = m_new;
    }
    float lsum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < S::kKeys / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sc[n][e] = exp2f(sc[n][e] - m_run[e / 2]);
        lsum[e / 2] += sc[n][e];
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) l_run[r] = l_run[r] * alpha[r] + lsum[r];
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      oacc[n][0] *= alpha[0];
      oacc[n][1] *= alpha[0];
      oacc[n][2] *= alpha[1];
      oacc[n][3] *= alpha[1];
    }

    // O += P · V, 16 keys a step: P's A fragment is the score tiles 2kk and 2kk + 1.
#pragma unroll
    for (int kk = 0; kk < S::kKeys / 16; ++kk) {
      uint32_t pa[P][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float c0 = sc[2 * kk + i / 2][2 * (i % 2)];
        const float c1 = sc[2 * kk + i / 2][2 * (i % 2) + 1];
        pa[0][i] = mm::pack_bf16(c0, c1);
        if constexpr (P == 2) {
          pa[P - 1][i] = mm::pack_bf16(c0 - mm::low_of(pa[0][i]), c1 - mm::high_of(pa[0][i]));
        }
      }
#pragma unroll
      for (int n0 = 0; n0 < HD; n0 += 16) {
        uint32_t vb[P][4];  // [0], [1]: dims n0.. ; [2], [3]: dims n0 + 8..
#pragma unroll
        for (int pl = 0; pl < P; ++pl) {
          mm::ldmatrix_x4_trans(smem_addr(vs + pl * S::kKPlane + (kk * 16 + lane % 16) * S::kPitch +
                                          n0 + (lane / 16) * 8),
                                vb[pl]);
        }
        mma_add<P>(oacc[n0 / 8], pa, vb, 0);
        mma_add<P>(oacc[n0 / 8 + 1], pa, vb, 1);
      }
    }
  }

  // The sums over each quad, then rows g and g + 8: dims 8n + 2t, 8n + 2t + 1.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
    const int64_t tok = tw + g + 8 * r;
    const float inv = 1.0f / l_run[r];
    float* dst = o.out + tok * o.ldo + head * HD;
    const float* gt = o.gate ? o.gate + tok * o.ldg + head * HD : nullptr;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      const int d = n * 8 + 2 * t;
      float v0 = oacc[n][2 * r] * inv, v1 = oacc[n][2 * r + 1] * inv;
      if (gt) {
        v0 = mul_sigmoid_f(v0, gt[d]);
        v1 = mul_sigmoid_f(v1, gt[d + 1]);
      }
      dst[d] = v0;
      dst[d + 1] = v1;
    }
  }
}

using MmaKernel = void (*)(AttnParams, MmaOut);

// The kernel for (head_dim, group, terms), its shared memory and tokens a CTA; null where none
// is compiled.
struct MmaVariant {
  MmaKernel kernel = nullptr;
  size_t smem = 0;
  int threads = 0, tokens = 0;
};
template <int HD, int G, int T>
MmaVariant variant_of() {
  using S = MmaShape<HD, G, T>;
  static const bool configured = [] {  // (once per kernel, not per launch)
    // (Not past the GPU's opt-in limit, which would throw: a variant that needs more is
    // refused by mma_takes, launched never.)
    HIBANA_CUDA(cudaFuncSetAttribute(mma_attention_kernel<HD, G, T>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     std::min(static_cast<int>(S::kSmem), smem_optin())));
    return true;
  }();
  (void)configured;
  return {mma_attention_kernel<HD, G, T>, S::kSmem, S::kThreads, S::kTokens};
}
template <int HD, int T>
MmaVariant variant_for_group(int64_t group) {
  switch (group) {
    case 2:
      return variant_of<HD, 2, T>();
    case 4:
      return variant_of<HD, 4, T>();
    case 8:
      return variant_of<HD, 8, T>();
    default:
      return {};
  }
}
template <int T>
MmaVariant variant_for(int64_t hd, int64_t group) {
  switch (hd) {
    case 64:
      return variant_for_group<64, T>(group);
    case 128:
      return variant_for_group<128, T>(group);
    case 256:
      return variant_for_group<256, T>(group);
    default:
      return {};
  }
}
MmaVariant variant(int64_t hd, int64_t group, int terms) {
  return terms == 3 ? variant_for<3>(hd, group) : variant_for<1>(hd, group);
}

}  // namespace

int mma_attention_terms() {
  if (!knob_on("HIBANA_CUDA_MMA_ATTENTION", true)) return 0;
  return knob("HIBANA_CUDA_MMA_ATTENTION", 1) == 3 ? 3 : 1;
}

bool mma_takes(int64_t hd, int64_t group, int terms) {
  const MmaVariant v = variant(hd, group, terms);
  return v.kernel && v.smem <= static_cast<size_t>(smem_per_block());
}

void mma_launch(const AttnParams& p, int64_t row0, int64_t rows, int terms, float* out, int64_t ldo,
                const float* gate, int64_t ldg) {
  const MmaVariant v = variant(p.hd, p.group, terms);
  check(v.kernel != nullptr && rows % v.tokens == 0, ErrorKind::internal,
        "mma attention: no kernel for these rows");
  const dim3 grid(static_cast<unsigned>(rows / v.tokens), static_cast<unsigned>(p.kv_heads));
  launch_pdl(v.kernel, grid, dim3(v.threads), v.smem, p, MmaOut{out, ldo, gate, ldg, row0});
  launched("attention_mma_kernel");
}

}  // namespace hibana::cuda::attn

namespace hibana {

bool cuda_attention_on_tensor_cores(int64_t head_dim, int64_t group, int terms) {
  return cuda::attn::mma_takes(head_dim, group, terms);
}

}  // namespace hibana
