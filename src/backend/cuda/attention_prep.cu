// What an attention layer does before attending, in one kernel (Backend::attention_prep): each
// head of q and k normalised with its norm weights, the rotary embedding of both, then k and v
// into the paged cache. It replaces five launches per attention layer (two norms, two ropes,
// store_kv), which at decode cost ~2.8 us each for a few KiB of data.
//
// One warp per (token, head), q's heads then k's; lane l holds the head's values l + 32 i
// (kPer = head_dim / 32 of them) in registers from the load to the stores. The arithmetic is
// that of the separate kernels (elementwise.cu's rmsnorm_kernel and rope_kernel): the same
// per-lane sum of squares in the same order and the same warp reduction, the same products,
// the same frequencies and angles, the same helpers (rms_inverse, rotate_pair); so the bits
// are theirs. The rotated pairs (d, d + half) must sit in one lane, so half is a multiple of 32
// (and head_dim at most 256): other shapes take the separate kernels (attention_prep_fits).
#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"

namespace hibana::cuda {

namespace {

struct PrepParams {
  float *q, *k, *kp, *vp;
  const float *v, *q_norm, *k_norm;
  const int32_t *pos, *slots;
  int64_t ldq, ldk, ldv, T, heads, kv_heads, page, rot_dim;
  int half_lanes;  // rotated pairs per lane: half / 32
  float theta, eps;
  bool zero_centred;
};

template <int kPer>
__global__ void __launch_bounds__(128) attention_prep_kernel(PrepParams p) {
  constexpr int64_t hd = 32 * kPer;
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t heads_all = p.heads + p.kv_heads;
  const bool live = w < p.T * heads_all;
  const int64_t t = live ? w / heads_all : 0, hh = live ? w % heads_all : 0;
  const bool is_q = hh < p.heads;
  const int64_t head = is_q ? hh : hh - p.heads;
  // Constants before the wait for the previous kernel: the norm weights and the frequencies
  // of the rotated dims (rope_kernel's expression).
  const float* nw = is_q ? p.q_norm : p.k_norm;
  float wv[kPer], inv_freq[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int64_t d = lane + 32 * i;
    wv[i] = nw[d];
    inv_freq[i] =
        i < p.half_lanes
            ? 1.0f / powf(p.theta, static_cast<float>(2 * d) / static_cast<float>(p.rot_dim))
            : 0.0f;
  }
  pdl_start();
  if (!live) return;
  float* x = (is_q ? p.q + t * p.ldq : p.k + t * p.ldk) + head * hd;
  const float* vr = p.v + t * p.ldv + head * hd;
  // Everything this warp reads, before any store.
  const int32_t at = p.pos[t];
  const int64_t slot = is_q ? -1 : p.slots[t];
  float xv[kPer], vv[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    xv[i] = x[lane + 32 * i];
    vv[i] = is_q ? 0.0f : vr[lane + 32 * i];
  }
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) ss = fmaf(xv[i], xv[i], ss);
  ss = warp_sum(ss);
  const float inv = rms_inverse(ss, static_cast<float>(hd), p.eps);
  float y[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    y[i] = p.zero_centred ? (xv[i] * inv) * (1.0f + wv[i]) : wv[i] * (xv[i] * inv);
  }
  // Rotation of the pairs (value i, value i + half_lanes) of this lane, from the normalised
  // values: one rotate_pair per pair (half_lanes <= kPer / 2), its partner selected in and out
  // (the indices stay compile-time: no local memory). A call for each (i, j) that might pair
  // inlined cosf and sinf kPer * kPer times (65 KB of SASS at head_dim 256).
  float r[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) r[i] = y[i];
#pragma unroll
  for (int i = 0; i < kPer / 2; ++i) {
    if (i >= p.half_lanes) break;
    const int partner = i + p.half_lanes;
    float x2 = y[i];
#pragma unroll
    for (int j = i + 1; j < kPer; ++j) x2 = j == partner ? y[j] : x2;
    float y1, y2;
    rotate_pair(y[i], x2, static_cast<float>(at) * inv_freq[i], y1, y2);
    r[i] = y1;
#pragma unroll
    for (int j = i + 1; j < kPer; ++j) r[j] = j == partner ? y2 : r[j];
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) x[lane + 32 * i] = r[i];
  if (slot < 0) return;  // q, or a padding row of a captured decode batch
  const int page = static_cast<int>(p.page);  // (32-bit: slots are int32)
  const int64_t pg = static_cast<int>(slot) / page, off = static_cast<int>(slot) % page;
  const int64_t dst = ((pg * p.kv_heads + head) * p.page + off) * hd;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    p.kp[dst + lane + 32 * i] = r[i];
    p.vp[dst + lane + 32 * i] = vv[i];
  }
}

}  // namespace

bool attention_prep_fits(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_norm,
                         const Tensor& k_norm, const Backend::AttentionPrep& a,
                         const Tensor& k_pages) {
  const int64_t hd = a.head_dim, half = a.rot_dim / 2;
  const bool shape = (hd == 64 || hd == 128 || hd == 256) && a.rot_dim % 2 == 0 &&
                     a.rot_dim <= hd && half % 32 == 0;
  const bool f32 = q.dtype == DType::f32 && k.dtype == DType::f32 && v.dtype == DType::f32 &&
                   q_norm.dtype == DType::f32 && k_norm.dtype == DType::f32 &&
                   k_pages.dtype == DType::f32;
  return shape && f32 && q_norm.numel() == hd && k_norm.numel() == hd &&
         q.shape[1] == a.heads * hd && k.shape[1] == a.kv_heads * hd &&
         v.shape[1] == a.kv_heads * hd && k_pages.shape[1] == a.kv_heads && k_pages.shape[3] == hd;
}

void attention_prep(Tensor q, Tensor k, const Tensor& v, const Tensor& q_norm, const Tensor& k_norm,
                    const Backend::AttentionPrep& a, Tensor k_pages, Tensor v_pages,
                    const BatchLayout& layout) {
  check(attention_prep_fits(q, k, v, q_norm, k_norm, a, k_pages), ErrorKind::internal,
        "attention_prep: shapes the fused kernel does not take");
  check(k_pages.shape[2] == layout.page_size, ErrorKind::internal,
        "attention_prep: page size mismatch");
  const int64_t T = q.shape[0];
  check(k.shape[0] == T && v.shape[0] == T, ErrorKind::internal, "attention_prep: rows");
  if (T == 0) return;
  PrepParams p{};
  p.q = q.ptr<float>();
  p.k = k.ptr<float>();
  p.kp = k_pages.ptr<float>();
  p.vp = v_pages.ptr<float>();
  p.v = v.ptr<float>();
  p.q_norm = q_norm.ptr<float>();
  p.k_norm = k_norm.ptr<float>();
  p.pos = layout.positions.ptr<int32_t>();
  p.slots = layout.kv_slot.ptr<int32_t>();
  p.ldq = ld(q);
  p.ldk = ld(k);
  p.ldv = ld(v);
  p.T = T;
  p.heads = a.heads;
  p.kv_heads = a.kv_heads;
  p.page = layout.page_size;
  p.rot_dim = a.rot_dim;
  p.half_lanes = static_cast<int>(a.rot_dim / 2 / 32);
  p.theta = static_cast<float>(a.theta);
  p.eps = a.eps;
  p.zero_centred = a.zero_centred;
  const unsigned blocks = blocks_for(T * (a.heads + a.kv_heads) * 32, 128);
  switch (a.head_dim) {
    case 64:
      launch_pdl(attention_prep_kernel<2>, blocks, 128, 0, p);
      break;
    case 128:
      launch_pdl(attention_prep_kernel<4>, blocks, 128, 0, p);
      break;
    default:
      launch_pdl(attention_prep_kernel<8>, blocks, 128, 0, p);
      break;
  }
  launched("attention_prep_kernel");
}

}  // namespace hibana::cuda
