// How fast the decode matmul's weight stream can go on this GPU, without its arithmetic: a
// kernel shaped like matmul_gemv.cu (4 warps per CTA, 16 weight rows per warp, each lane
// copying 16-byte pieces with cp.async into a warp-private ring, D - 1 stages in flight) that
// only folds what lands into a checksum, reading the matrix either
//   rows:  as the decode matmul does today, 128 bytes of each of the warp's 16 rows per stage
//          (rows a full row stride apart), or
//   tiles: the same bytes laid out so that each warp's stage is one contiguous 2 KiB piece
//          (what a load-time reordering of the weights would give).
// If "tiles" is much faster than "rows", the weight layout, not the instruction count, is
// what holds the bf16 decode matmul near 62% of copy bandwidth.
//
// Not part of the build (a measuring tool, like launch_floor.cu):
//   nvcc -O3 -std=c++17 -arch=sm_90 -o weight_stream tools/gpu/weight_stream.cu && ./weight_stream
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "gpu_timing.cuh"

constexpr int kWarps = 4, kStageBytes = 2048, kDepth = 6;  // per warp: 12 KiB of ring

__device__ __forceinline__ void cp16(unsigned smem, const void* g) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(smem), "l"(g));
}
__device__ __forceinline__ void commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wait_groups() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// w: [N rows][row_bytes]; each warp streams rows [16 w, 16 w + 16) over the whole row, 128
// bytes of each row per stage (tiles == false) or one contiguous 2 KiB per stage (tiles ==
// true: the warp's rows stored stage after stage).
template <bool kTiles>
__global__ void __launch_bounds__(kWarps * 32)
    stream_kernel(const uint8_t* w, int64_t row_bytes, unsigned* sink) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t rows0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * 16;
  const int stages = static_cast<int>(row_bytes / 128);
  const unsigned ring = static_cast<unsigned>(__cvta_generic_to_shared(smem)) +
                        warp * kDepth * kStageBytes + lane * 16;
  auto issue = [&](int s) {
    if (s < stages) {
      const unsigned dst = ring + (s % kDepth) * kStageBytes;
      for (int c = 0; c < 4; ++c) {  // 4 x 32 lanes x 16 bytes = 2 KiB
        const uint8_t* src;
        if (kTiles) {
          src =
              w + rows0 * row_bytes + static_cast<int64_t>(s) * kStageBytes + (c * 32 + lane) * 16;
        } else {  // rows g + 8 (c & 1), bytes 64 (c >> 1) + 16 t of this stage's 128
          src = w + (rows0 + g + 8 * (c & 1)) * row_bytes + s * 128 + 64 * (c >> 1) + 16 * t;
        }
        cp16(dst + c * 512, src);
      }
    }
    commit();
  };
  for (int s = 0; s < kDepth - 1; ++s) issue(s);
  unsigned acc = 0;
  for (int s = 0; s < stages; ++s) {
    wait_groups<kDepth - 2>();
    const uint4* got = reinterpret_cast<const uint4*>(smem + warp * kDepth * kStageBytes +
                                                      (s % kDepth) * kStageBytes) +
                       lane;
    for (int c = 0; c < 4; ++c) {
      const uint4 v = got[c * 32];
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    issue(s + kDepth - 1);
  }
  if (acc == 0x12345678u) *sink = acc;
}

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t max_bytes = size_t(384) << 20;  // > L2, and two copies of it alternate
  uint8_t *w0, *w1;
  unsigned* sink;
  CHECK(cudaMalloc(&w0, max_bytes));
  CHECK(cudaMalloc(&w1, max_bytes));
  CHECK(cudaMemset(w0, 1, max_bytes));
  CHECK(cudaMemset(w1, 2, max_bytes));
  CHECK(cudaMalloc(&sink, 4));
  const double copy = copy_gbs(s, w1, w0, max_bytes);
  std::printf("copy bandwidth %.1f GB/s\n", copy);
  const int smem = kWarps * kDepth * kStageBytes;
  CHECK(cudaFuncSetAttribute(stream_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             smem));
  CHECK(
      cudaFuncSetAttribute(stream_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  std::printf("%8s %8s %6s %10s %10s %9s\n", "N", "K(bf16)", "layout", "us/call", "GB/s",
              "of copy");
  const int64_t shapes[][2] = {
      {24576, 4096}, {4096, 4096}, {6144, 4096}, {4096, 12288}, {12288, 2048}};
  for (const auto& sh : shapes) {
    const int64_t N = sh[0], row_bytes = sh[1] * 2, bytes = N * row_bytes;
    if (static_cast<size_t>(bytes) > max_bytes) continue;
    for (bool tiles : {false, true}) {
      int flip = 0;
      const float us = graph_us(s, 20, [&] {
        const uint8_t* w = (flip++ & 1) ? w1 : w0;  // alternate so L2 never holds the matrix
        if (tiles) {
          stream_kernel<true><<<N / 64, kWarps * 32, smem, s>>>(w, row_bytes, sink);
        } else {
          stream_kernel<false><<<N / 64, kWarps * 32, smem, s>>>(w, row_bytes, sink);
        }
      });
      const double gbs = bytes / (us * 1e-6) / 1e9;
      std::printf("%8lld %8lld %6s %10.2f %10.1f %8.1f%%\n", static_cast<long long>(N),
                  static_cast<long long>(sh[1]), tiles ? "tiles" : "rows", us, gbs,
                  100.0 * gbs / copy);
    }
  }
  return 0;
}
