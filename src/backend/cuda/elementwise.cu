// Embedding, norms, rotary embedding and elementwise ops on CUDA (the MoE routing is in
// moe_route.cu). Reductions run in a fixed order per row, so a row's result does not depend on
// the other rows of the batch.
#include <algorithm>
#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/norm_impl.cuh"
#include "backend/cuda/ops.h"

namespace hibana::cuda {

namespace {

void check_same_rows(const Tensor& a, const Tensor& b, const char* op) {
  check(a.shape[0] == b.shape[0] && a.shape[1] == b.shape[1], ErrorKind::internal,
        std::string(op) + ": shapes " + a.shape_string() + " and " + b.shape_string() + " differ");
}

// ---- embedding ---------------------------------------------------------------------------

template <Elt E>
__global__ void embedding_kernel(const void* table, int64_t ldt, const float* scale,
                                 int64_t scale_ld, int64_t block_rows, int64_t block_cols,
                                 const int32_t* ids, int64_t H, float* out, int64_t ldo) {
  pdl_start();
  const int64_t t = blockIdx.x;
  const int64_t row = ids[t];
  for (int64_t i = blockIdx.y * blockDim.x + threadIdx.x; i < H; i += gridDim.y * blockDim.x) {
    float v = load_elt<E>(table, row * ldt + i);
    if (scale) v *= scale[(row / block_rows) * scale_ld + i / block_cols];
    out[t * ldo + i] = v;
  }
}

// ---- norms -------------------------------------------------------------------------------

// One warp per group of G values (norm_group_warp).
template <bool kGated>
__global__ void rmsnorm_kernel(const float* x, int64_t ldx, const float* z, int64_t ldz,
                               const float* w, float eps, bool zero_centred, int64_t rows,
                               int64_t D, int64_t G, float* out, int64_t ldo) {
  // The warp's group before the wait: 64-bit divisions, long emulated sequences that would
  // otherwise sit on the decode chain after it.
  const int64_t groups_per_row = D / G;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t r = warp / groups_per_row, c0 = (warp % groups_per_row) * G;
  pdl_start();
  if (warp >= rows * groups_per_row) return;
  const float* xr = x + r * ldx + c0;
  const float* zr = kGated ? z + r * ldz + c0 : nullptr;
  norm_group_warp<kGated>([&](int64_t i) { return xr[i]; }, [&](int64_t i) { return zr[i]; },
                          [&](int64_t i) { return w[i]; }, eps, zero_centred, G, out + r * ldo + c0,
                          lane);
}

// One 256-thread CTA per group, for wide groups (whole hidden rows): wide_norm_group
// (norm_impl.cuh). kAdd: x += add first (the residual add before a norm, one kernel for both).
template <bool kGated, bool kAdd, int kC>
__global__ void __launch_bounds__(kWideThreads)
    rmsnorm_wide_kernel(const float* x, int64_t ldx, const float* z, int64_t ldz, const float* w,
                        float eps, bool zero_centred, int64_t D, int64_t G, float* out, int64_t ldo,
                        const float* add = nullptr, int64_t lda = 0) {
  float wv[kC];
  wide_norm_weights(w, G, wv);  // constants: before the wait
  const int64_t groups_per_row = D / G;  // (and the divisions: rmsnorm_kernel says why)
  const int64_t r = blockIdx.x / groups_per_row, c0 = (blockIdx.x % groups_per_row) * G;
  pdl_start();
  wide_norm_group<kGated, kAdd>(x + r * ldx + c0, kGated ? z + r * ldz + c0 : nullptr,
                                kAdd ? add + r * lda + c0 : nullptr, w, wv, eps, zero_centred, G,
                                out + r * ldo + c0);
}

// ---- rotary embedding ----------------------------------------------------------------------

__global__ void rope_kernel(float* x, int64_t ldx, int64_t T, int64_t heads, int64_t head_dim,
                            int64_t half, float theta, int64_t rot_dim, const int32_t* pos) {
  // The frequency depends on nothing the previous kernel writes: computed before the wait; the
  // position and both values are then loaded together.
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * heads * half) return;
  const int64_t t = i / (heads * half), h = (i / half) % heads, d = i % half;
  const float inv_freq =
      1.0f / powf(theta, static_cast<float>(2 * d) / static_cast<float>(rot_dim));
  pdl_start();
  float* v = x + t * ldx + h * head_dim;
  const int32_t at = pos[t];
  const float x1 = v[d], x2 = v[d + half];
  float y1, y2;
  rotate_pair(x1, x2, static_cast<float>(at) * inv_freq, y1, y2);
  v[d] = y1;
  v[d + half] = y2;
}

// ---- elementwise ------------------------------------------------------------------------------

enum class Op { add, mul_sigmoid, silu_mul, gather };

template <Op kOp>
__global__ void binary_kernel(float* out, int64_t ldo, const float* a, int64_t lda, const float* b,
                              int64_t ldb, const int32_t* index, int64_t rows, int64_t cols) {
  pdl_start();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  if constexpr (kOp == Op::add) {
    out[r * ldo + c] = a[r * lda + c] + b[r * ldb + c];
  } else if constexpr (kOp == Op::mul_sigmoid) {
    out[r * ldo + c] = mul_sigmoid_f(a[r * lda + c], b[r * ldb + c]);
  } else if constexpr (kOp == Op::silu_mul) {
    out[r * ldo + c] = silu_mul_f(a[r * lda + c], b[r * ldb + c]);
  } else {
    out[r * ldo + c] = a[r * lda + index[c]];
  }
}

template <Op kOp>
void launch_binary(Tensor out, const Tensor& a, const Tensor& b, const int32_t* index = nullptr) {
  const int64_t rows = out.shape[0], cols = out.shape[1];
  if (rows * cols == 0) return;
  launch_pdl(binary_kernel<kOp>, blocks_for(rows * cols, 256), 256, 0, out.ptr<float>(), ld(out),
             a.ptr<float>(), ld(a), b.empty() ? nullptr : b.ptr<float>(), b.empty() ? 0 : ld(b),
             index, rows, cols);
  launched("binary_kernel");
}

__global__ void add_sigmoid_scaled_kernel(float* x, int64_t ldx, const float* y, int64_t ldy,
                                          const float* g, int64_t ldg, int64_t rows, int64_t cols) {
  pdl_start();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  x[r * ldx + c] += sigmoid_f(g[r * ldg]) * y[r * ldy + c];
}

}  // namespace

void embedding(const Weight& table, const Tensor& ids, Tensor out) {
  const int64_t T = ids.numel(), H = table.cols();
  check(out.shape[0] == T && out.shape[1] == H, ErrorKind::internal, "embedding: output shape");
  if (T == 0) return;
  const float* scale = nullptr;
  int64_t scale_ld = 0;
  if (!table.scale.empty()) {
    check(table.scale.dtype == DType::f32, ErrorKind::unsupported,
          "CUDA embedding: block scales must be f32");
    scale = table.scale.ptr<float>();
    scale_ld = table.scale.stride[0];
  }
  dim3 grid(static_cast<unsigned>(T), std::min(blocks_for(H, 256), 64u));
  auto go = [&](auto kernel) {
    launch_pdl(kernel, grid, 256, 0, table.w.data, table.w.stride[0], scale, scale_ld,
               table.block_rows, table.block_cols, ids.ptr<int32_t>(), H, out.ptr<float>(),
               ld(out));
  };
  switch (elt_of(table.w.dtype)) {
    case Elt::f32:
      go(embedding_kernel<Elt::f32>);
      break;
    case Elt::bf16:
      go(embedding_kernel<Elt::bf16>);
      break;
    case Elt::f16:
      go(embedding_kernel<Elt::f16>);
      break;
    case Elt::fp8:
      go(embedding_kernel<Elt::fp8>);
      break;
  }
  launched("embedding_kernel");
}

namespace {
// Both norms: a 256-thread CTA per group for wide groups (whole hidden rows), a warp per group
// for narrow ones (heads).
template <bool kGated>
void launch_norm(const Tensor& x, const Tensor* z, const Tensor& w, float eps, bool zero_centred,
                 Tensor out, const char* op) {
  check_same_rows(x, out, op);
  if (z) check_same_rows(x, *z, op);
  const int64_t R = x.shape[0], D = x.shape[1], G = w.numel();
  check(G > 0 && D % G == 0, ErrorKind::internal,
        std::string(op) + ": weight size does not divide the row");
  const int64_t groups = R * (D / G);
  if (groups == 0) return;
  const float* zp = z ? z->ptr<float>() : nullptr;
  const int64_t ldz = z ? ld(*z) : 0;
  if (G >= 1024) {
    with_wide_cached(G, [&](auto c) {
      launch_pdl(rmsnorm_wide_kernel<kGated, false, decltype(c)::value>,
                 static_cast<unsigned>(groups), kWideThreads, 0, x.ptr<float>(), ld(x), zp, ldz,
                 w.ptr<float>(), eps, zero_centred, D, G, out.ptr<float>(), ld(out), nullptr,
                 int64_t{0});
    });
  } else {
    launch_pdl(rmsnorm_kernel<kGated>, blocks_for(groups * 32, 256), 256, 0, x.ptr<float>(), ld(x),
               zp, ldz, w.ptr<float>(), eps, zero_centred, R, D, G, out.ptr<float>(), ld(out));
  }
  launched(op);
}
}  // namespace

void rmsnorm(const Tensor& x, const Tensor& w, float eps, bool zero_centred, Tensor out) {
  launch_norm<false>(x, nullptr, w, eps, zero_centred, out, "rmsnorm");
}

void gated_rmsnorm(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor out) {
  launch_norm<true>(x, &z, w, eps, false, out, "gated_rmsnorm");
}

bool add_rmsnorm_is_wide(const Tensor& x, const Tensor& w, const Tensor& out) {
  return w.numel() == x.shape[1] && w.numel() >= 1024 && out.data != x.data;
}

void add_rmsnorm(Tensor x, const Tensor& y, const Tensor& w, float eps, bool zero_centred,
                 Tensor out) {
  const int64_t R = x.shape[0], G = w.numel();
  if (!add_rmsnorm_is_wide(x, w, out)) {  // narrow rows: the two kernels
    add(x, y);
    return rmsnorm(x, w, eps, zero_centred, out);
  }
  check_same_rows(x, y, "add_rmsnorm");
  check_same_rows(x, out, "add_rmsnorm");
  if (R == 0) return;
  with_wide_cached(G, [&](auto c) {
    launch_pdl(rmsnorm_wide_kernel<false, true, decltype(c)::value>, static_cast<unsigned>(R),
               kWideThreads, 0, x.ptr<float>(), ld(x), nullptr, int64_t{0}, w.ptr<float>(), eps,
               zero_centred, G, G, out.ptr<float>(), ld(out), y.ptr<float>(), ld(y));
  });
  launched("add_rmsnorm");
}

void gather_columns(const Tensor& x, const Tensor& index, Tensor out) {
  check(out.shape[1] == index.numel() && out.shape[0] == x.shape[0], ErrorKind::internal,
        "gather_columns: output shape");
  launch_binary<Op::gather>(out, x, Tensor(), index.ptr<int32_t>());
}

void rope(Tensor x, int64_t heads, int64_t head_dim, int64_t rot_dim, double theta,
          const BatchLayout& layout) {
  check(rot_dim % 2 == 0 && rot_dim <= head_dim, ErrorKind::internal, "rope: rotary dims");
  const int64_t T = x.shape[0], half = rot_dim / 2, n = T * heads * half;
  if (n == 0) return;
  launch_pdl(rope_kernel, blocks_for(n, 256), 256, 0, x.ptr<float>(), ld(x), T, heads, head_dim,
             half, static_cast<float>(theta), rot_dim, layout.positions.ptr<int32_t>());
  launched("rope_kernel");
}

void add(Tensor x, const Tensor& y) {
  check_same_rows(x, y, "add");
  launch_binary<Op::add>(x, x, y);
}

void mul_sigmoid(Tensor x, const Tensor& g) {
  check_same_rows(x, g, "mul_sigmoid");
  launch_binary<Op::mul_sigmoid>(x, x, g);
}

void silu_mul(const Tensor& gate, const Tensor& up, Tensor out) {
  check_same_rows(gate, up, "silu_mul");
  check_same_rows(gate, out, "silu_mul");
  launch_binary<Op::silu_mul>(out, gate, up);
}

void add_sigmoid_scaled(Tensor x, const Tensor& y, const Tensor& g) {
  check_same_rows(x, y, "add_sigmoid_scaled");
  const int64_t rows = x.shape[0], cols = x.shape[1];
  if (rows * cols == 0) return;
  launch_pdl(add_sigmoid_scaled_kernel, blocks_for(rows * cols, 256), 256, 0, x.ptr<float>(), ld(x),
             y.ptr<float>(), ld(y), g.ptr<float>(), ld(g), rows, cols);
  launched("add_sigmoid_scaled_kernel");
}

}  // namespace hibana::cuda
