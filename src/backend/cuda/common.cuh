// Shared by the CUDA kernel files: error checks, the compute stream, stream-ordered scratch
// memory, and element decoding. Kernels compute in f32 whatever the storage dtype.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "backend/backend.h"
#include "core/error.h"

namespace hibana::cuda {

[[noreturn]] void throw_cuda(cudaError_t e, const char* what);

#define HIBANA_CUDA(call)                                                       \
  do {                                                                          \
    cudaError_t hibana_e_ = (call);                                             \
    if (hibana_e_ != cudaSuccess) ::hibana::cuda::throw_cuda(hibana_e_, #call); \
  } while (0)

// For calls whose failure must not stop the caller (frees in destructors): logs a failure
// and clears the runtime's last-error state, which `launched` would otherwise report against
// the next kernel launched on this thread.
void warn_cuda(cudaError_t e, const char* what);

// Every kernel and copy of the backend runs on this stream, so work is ordered without events.
cudaStream_t stream();

// Reports a failed launch (bad configuration) at the launch site.
inline void launched(const char* kernel) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw_cuda(e, kernel);
}

// Programmatic dependent launch (sm_90 and newer): a kernel started with launch_pdl may begin
// while the stream's previous kernel still runs. It must call pdl_wait() before it reads or
// writes anything another kernel writes or reads (only constants such as weights may be read
// before: memory is reused between ops), and may call pdl_trigger() once it no longer needs the
// GPU to itself, letting the next kernel start launching. Both are no-ops in a kernel launched
// the ordinary way, and below sm_90.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
// The start of most kernels: wait for the previous kernel, then let the next one launch (its
// start-up overlaps this kernel's run).
__device__ __forceinline__ void pdl_start() {
  pdl_wait();
  pdl_trigger();
}
// True on sm_90+ unless HIBANA_CUDA_PDL=0.
bool pdl_enabled();
// A launch on stream() that may start while the kernel before it runs (a programmatic
// dependent launch, where pdl_enabled: the kernel's pdl_wait orders it).
template <typename... P, typename... A>
void launch_pdl(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream();
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  HIBANA_CUDA(cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...));
}

// Device memory that lives until the end of the current op (stream-ordered: freed memory is
// reused only by work queued after it; while a graph is recorded it comes from the recording
// arena, see cuda_backend.cu). From 32 MiB on it is a cudaMalloc, whose cudaFree waits for the
// device, unless `pooled`: then it always comes from the stream-ordered pool, which keeps it for
// reuse (for scratch that every product of a pass takes, where a wait per product would cost).
class Scratch {
 public:
  explicit Scratch(size_t bytes, bool pooled = false);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
  bool pooled_ = false;
};

// How many times an allocation the driver refused waited for the stream and had the
// stream-ordered pool give its idle memory back before asking again (device_allocate): memory
// has run short. Optional scratch (the tiled matmul's pre-split planes) is not asked for after.
int64_t pool_trims();

// Storage formats a kernel can read, as template parameters.
enum class Elt : int { f32, bf16, f16, fp8 };

inline Elt elt_of(DType t) {
  switch (t) {
    case DType::f32:
      return Elt::f32;
    case DType::bf16:
      return Elt::bf16;
    case DType::f16:
      return Elt::f16;
    case DType::f8_e4m3:
      return Elt::fp8;
    default:
      throw Error(ErrorKind::unsupported,
                  std::string("CUDA kernels cannot read dtype ") + dtype_name(t));
  }
}

template <Elt E>
struct EltInfo;
template <>
struct EltInfo<Elt::f32> {
  static constexpr int size = 4;
};
template <>
struct EltInfo<Elt::bf16> {
  static constexpr int size = 2;
};
template <>
struct EltInfo<Elt::f16> {
  static constexpr int size = 2;
};
template <>
struct EltInfo<Elt::fp8> {
  static constexpr int size = 1;
};

template <Elt E>
__device__ __forceinline__ float load_elt(const void* base, int64_t i) {
  if constexpr (E == Elt::f32) {
    return static_cast<const float*>(base)[i];
  } else if constexpr (E == Elt::bf16) {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  } else if constexpr (E == Elt::f16) {
    return __half2float(static_cast<const __half*>(base)[i]);
  } else {
    __half_raw h =
        __nv_cvt_fp8_to_halfraw(static_cast<const __nv_fp8_storage_t*>(base)[i], __NV_E4M3);
    return __half2float(__half(h));
  }
}

// Decodes the 16 bytes `v` holds (16 / size elements) to f32.
template <Elt E>
__device__ __forceinline__ void decode16(const uint4& v, float* out) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  if constexpr (E == Elt::f32) {
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = __uint_as_float(w[i]);
  } else if constexpr (E == Elt::bf16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = __uint_as_float(w[i] << 16);
      out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  } else if constexpr (E == Elt::f16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __half2 h = *reinterpret_cast<const __half2*>(&w[i]);
      float2 f = __half22float2(h);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __half2_raw lo =
          __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[i] & 0xffff), __NV_E4M3);
      __half2_raw hi =
          __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w[i] >> 16), __NV_E4M3);
      float2 a = __half22float2(__half2(lo)), b = __half22float2(__half2(hi));
      out[4 * i] = a.x;
      out[4 * i + 1] = a.y;
      out[4 * i + 2] = b.x;
      out[4 * i + 3] = b.y;
    }
  }
}

// Asynchronous global -> shared copies (sm_80+); `valid` false writes zeros instead.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(valid ? 16 : 0));
}
// The same for streamed weights: the L2 fetches the next 256 bytes along with these.
__device__ __forceinline__ void cp_async16_stream(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(valid ? 16 : 0));
}
// The same with the shared address already in the shared window.
__device__ __forceinline__ void cp_async16_stream_s(unsigned smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ float sigmoid_f(float x) {
  return 1.0f / (1.0f + expf(-x));
}
__device__ __forceinline__ float silu_f(float x) {
  return x / (1.0f + expf(-x));
}
// a * sigmoid(g), each step rounded on its own (as silu_mul_f): the gate kernel and the
// attention merge that applies it give the same bits.
__device__ __forceinline__ float mul_sigmoid_f(float a, float g) {
  return __fmul_rn(a, __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-g))));
}
// silu(g) * u, each step rounded on its own (no contraction into an fma, whatever kernel it is
// inlined into): silu_mul and the decode matmul's fused SwiGLU give the same bits.
__device__ __forceinline__ float silu_mul_f(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

// Sum over a warp in a fixed butterfly order (every lane gets the same bits).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The inverse RMS of n values whose squares sum to ss, and the rotary embedding of one pair:
// every kernel that normalises or rotates calls these, so fused kernels have the separate
// kernels' bits. The roundings are explicit (__fadd_rn, __fmul_rn: never contracted into a
// multiply-add), since the compiler contracts differently where n is a compile-time power of
// two (ss / 128 becomes a multiply, then a multiply-add with eps) or where a loop is unrolled.
__device__ __forceinline__ float rms_inverse(float ss, float n, float eps) {
  return 1.0f / sqrtf(__fadd_rn(ss / n, eps));
}

// A group of G values normalised by one warp: y = x * rsqrt(mean(x^2) + eps) * w (or * (1 + w)),
// and for the gated form additionally * silu(z); x(i), z(i), w(i) give value i. The norm
// kernel's and the fused kernels' arithmetic (the same bits wherever the values come from).
// The output pass loads four values per lane before it stores any (a store may alias a later
// load, so interleaving them would make each load wait for the one before: y may be x).
// One value of a normalised group (inv: rms_inverse of the group's squares).
template <bool kGated>
__device__ __forceinline__ float norm_value(float x, float w, float z, float inv,
                                            bool zero_centred) {
  const float v = zero_centred ? (x * inv) * (1.0f + w) : w * (x * inv);
  return kGated ? silu_mul_f(z, v) : v;  // (explicit roundings: see silu_mul_f)
}
template <bool kGated, typename X, typename Z, typename W>
__device__ __forceinline__ void norm_group_warp(X x, Z z, W w, float eps, bool zero_centred,
                                                int64_t G, float* y, int lane) {
  float ss = 0.0f;
  for (int64_t i = lane; i < G; i += 32) ss = fmaf(x(i), x(i), ss);
  ss = warp_sum(ss);
  const float inv = rms_inverse(ss, static_cast<float>(G), eps);
  constexpr int kChunk = 4;
  for (int64_t i0 = lane; i0 < G; i0 += 32 * kChunk) {
    float xv[kChunk], wv[kChunk], zv[kChunk];
#pragma unroll
    for (int q = 0; q < kChunk; ++q) {
      const int64_t i = i0 + 32 * q;
      const bool in = i < G;
      xv[q] = in ? x(i) : 0.0f;
      wv[q] = in ? w(i) : 0.0f;
      if constexpr (kGated) zv[q] = in ? z(i) : 0.0f;
    }
#pragma unroll
    for (int q = 0; q < kChunk; ++q) {
      const int64_t i = i0 + 32 * q;
      if (i >= G) break;
      y[i] = norm_value<kGated>(xv[q], wv[q], kGated ? zv[q] : 0.0f, inv, zero_centred);
    }
  }
}

__device__ __forceinline__ void rotate_pair(float x1, float x2, float ang, float& y1, float& y2) {
  const float cs = cosf(ang), sn = sinf(ang);
  y1 = __fsub_rn(__fmul_rn(x1, cs), __fmul_rn(x2, sn));
  y2 = __fadd_rn(__fmul_rn(x2, cs), __fmul_rn(x1, sn));
}

// A positive tuning knob from the environment (benchmarks sweep them), or `fallback`.
inline int64_t knob(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  const int64_t n = v ? std::atoll(v) : 0;
  return n > 0 ? n : fallback;
}

// An on/off knob from the environment: unset or empty gives `fallback`; "0", "off", "false" or
// "no" turn it off, any other value on. (knob() would read "0" as unset: a switch that is on by
// default needs this.)
inline bool knob_on(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  for (const char* off : {"0", "off", "false", "no"}) {
    if (std::strcmp(v, off) == 0) return false;
  }
  return true;
}

inline unsigned blocks_for(int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

// Row stride in elements of a 2-D f32 tensor (rows may be a column range of a wider buffer).
inline int64_t ld(const Tensor& t) {
  return t.stride[0];
}

}  // namespace hibana::cuda
