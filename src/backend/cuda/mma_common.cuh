// Private to the tensor-core files (matmul_mma.cu for small batches, matmul_tiled.cu for large
// ones, attention_mma.cu for prefill attention): the mma instruction, the three-term bf16 split
// of f32 activations and the A fragment of a lane's 16 weight bytes. The matmul kernels build
// every output element from the same sequence of these, which is what makes a token's bits
// independent of its batch.
#pragma once

#include "backend/cuda/common.cuh"

namespace hibana::cuda::mm {

__device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                    uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
  __trap();  // not reached: CudaBackend refuses GPUs below sm_80
#endif
}

// Two 8x8 b16 matrices from shared memory: lanes 0-7 give the rows of the first, 8-15 of the
// second (16 bytes each, at shared-window address `row`); lane (g, t) gets each matrix's row g,
// elements 2t and 2t + 1.
__device__ __forceinline__ void ldmatrix_x2(unsigned row, uint32_t (&r)[2]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(row));
}

// Four 8x8 b16 matrices: lanes 8i to 8i + 7 give the rows of matrix i; lane (g, t) gets each
// matrix's row g, elements 2t and 2t + 1 (with .trans: its column g, rows 2t and 2t + 1).
__device__ __forceinline__ void ldmatrix_x4(unsigned row, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned row, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ float low_of(uint32_t v) {
  return __uint_as_float(v << 16);
}
__device__ __forceinline__ float high_of(uint32_t v) {
  return __uint_as_float(v & 0xffff0000u);
}

// Two f32 values as three bf16x2 terms, x = h + m + l (the subtractions are exact).
struct Split3 {
  uint32_t h, m, l;
  // Term s: 0 h, 1 m, 2 l.
  __device__ __forceinline__ uint32_t term(int s) const { return s == 0 ? h : s == 1 ? m : l; }
};
__device__ __forceinline__ Split3 split3(float x0, float x1) {
  Split3 s;
  s.h = pack_bf16(x0, x1);
  float r0 = x0 - low_of(s.h), r1 = x1 - high_of(s.h);
  s.m = pack_bf16(r0, r1);
  r0 -= low_of(s.m);
  r1 -= high_of(s.m);
  s.l = pack_bf16(r0, r1);
  return s;
}

__device__ __forceinline__ uint32_t fp8x2_to_bf16x2(uint32_t two) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  const float2 f = __half22float2(__half2(h));
  return pack_bf16(f.x, f.y);
}

// The A fragment of the j-th k16 product of a chunk, from the lane's 16 bytes of rows g (ra)
// and g + 8 (rb): positions (2t, 2t+1) take the lane's elements 4j, 4j+1 and positions
// (2t+8, 2t+9) its elements 4j+2, 4j+3.
template <Elt E>
__device__ __forceinline__ void a_fragment(const uint4& ra, const uint4& rb, int j,
                                           uint32_t (&a)[4]) {
  const uint32_t* wa = reinterpret_cast<const uint32_t*>(&ra);
  const uint32_t* wb = reinterpret_cast<const uint32_t*>(&rb);
  if constexpr (E == Elt::bf16) {
    a[0] = wa[2 * j];
    a[1] = wb[2 * j];
    a[2] = wa[2 * j + 1];
    a[3] = wb[2 * j + 1];
  } else {
    a[0] = fp8x2_to_bf16x2(wa[j] & 0xffffu);
    a[1] = fp8x2_to_bf16x2(wb[j] & 0xffffu);
    a[2] = fp8x2_to_bf16x2(wa[j] >> 16);
    a[3] = fp8x2_to_bf16x2(wb[j] >> 16);
  }
}

}  // namespace hibana::cuda::mm
