// What a decode kernel cannot go below on this GPU: the time per kernel of a CUDA graph of
// empty kernels, and of kernels that only read N bytes (each CTA a contiguous slice, 16-byte
// loads, four in flight per thread), with and without programmatic dependent launch, and with
// a split-K style tail (every CTA publishes a value, the last one of each group of 8 adds
// them) — the floor under `hibana bench matmul`'s per-call figures.
//
// Not part of the build (a measuring tool, like the rest of tools/gpu):
//   nvcc -O3 -std=c++17 -arch=sm_90 -o launch_floor tools/gpu/launch_floor.cu && ./launch_floor
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gpu_timing.cuh"


__device__ __forceinline__ void pdl_start() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__global__ void empty_kernel(int* sink) {
  pdl_start();
  if (threadIdx.x == 1024) *sink = 1;  // never: keeps the kernel from being trivial
}

// Reads bytes [blockIdx.x * per_cta, +per_cta); with `tail`, CTAs in groups of 8 publish a
// partial and the last of each group (atomic counter) adds the group's partials.
__global__ void read_kernel(const uint4* src, size_t per_cta, int* sink, float* partial,
                            int* counters, bool tail) {
  pdl_start();
  const uint4* p = src + blockIdx.x * (per_cta / 16);
  const size_t n = per_cta / 16;
  uint32_t acc = 0;
  size_t i = threadIdx.x;
  for (; i + 3 * blockDim.x < n; i += 4 * blockDim.x) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = __ldg(p + i + u * blockDim.x);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += blockDim.x) acc ^= __ldg(p + i).x;
  if (acc == 0x12345678u) *sink = static_cast<int>(acc);
  if (!tail) return;
  __shared__ bool last;
  if (threadIdx.x == 0) partial[blockIdx.x] = static_cast<float>(acc & 0xff);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counters + blockIdx.x / 8, 1) == 7;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (threadIdx.x == 0) {
    float s = 0;
    for (int j = 0; j < 8; ++j) s += __ldcg(partial + (blockIdx.x / 8) * 8 + j);
    counters[blockIdx.x / 8] = 0;
    if (s < 0) *sink = 1;
  }
}


template <typename... P, typename... A>
void launch(void (*k)(P...), dim3 grid, dim3 block, cudaStream_t s, bool pdl, A... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  CHECK(cudaLaunchKernelEx(&cfg, k, args...));
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t max_bytes = size_t(256) << 20;
  void *src, *dst;
  int *sink, *counters;
  float* partial;
  CHECK(cudaMalloc(&src, max_bytes));
  CHECK(cudaMalloc(&dst, max_bytes));
  CHECK(cudaMemset(src, 1, max_bytes));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMalloc(&partial, 1 << 20));
  CHECK(cudaMalloc(&counters, 1 << 20));
  CHECK(cudaMemset(counters, 0, 1 << 20));

  // Copy bandwidth (read + write), as hibana reports it.
  const double copy = copy_gbs(s, dst, src, max_bytes);
  std::printf("%s, %d SMs, copy bandwidth %.1f GB/s\n", prop.name, sms, copy);

  for (bool pdl : {false, true}) {
    const float us =
        graph_us(s, 400, [&] { launch(empty_kernel, dim3(sms * 4), dim3(128), s, pdl, sink); });
    std::printf("empty kernel (%d CTAs), PDL %-3s: %6.2f us per kernel\n", sms * 4,
                pdl ? "on" : "off", us);
  }
  std::printf("%10s %6s %5s %4s %10s %10s %9s\n", "bytes", "CTAs", "tail", "PDL", "us/kernel",
              "GB/s", "of copy");
  for (size_t mib : {2, 8, 32, 128, 256}) {
    const size_t bytes = mib << 20;
    for (int ctas : {sms * 4, sms * 8}) {
      size_t per_cta = (bytes / ctas) / 1024 * 1024;
      if (per_cta == 0) continue;
      for (bool tail : {false, true}) {
        for (bool pdl : {false, true}) {
          const float us = graph_us(s, 50, [&] {
            launch(read_kernel, dim3(ctas), dim3(256), s, pdl, static_cast<const uint4*>(src),
                   per_cta, sink, partial, counters, tail);
          });
          const double read = static_cast<double>(per_cta) * ctas;
          const double gbs = read / (us * 1e-6) / 1e9;
          std::printf("%7zu MiB %6d %5s %4s %10.2f %10.1f %8.1f%%\n", mib, ctas,
                      tail ? "yes" : "no", pdl ? "on" : "off", us, gbs, 100.0 * gbs / copy);
        }
      }
    }
  }
  return 0;
}
