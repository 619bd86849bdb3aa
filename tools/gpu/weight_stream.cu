// How fast the decode matmul's weight stream can go on this GPU, without its arithmetic: the
// kernel of weight_stream.cuh, reading the matrix either
//   rows:  as the decode matmul does today, 128 bytes of each of the warp's 16 rows per stage
//          (rows a full row stride apart), or
//   tiles: the same bytes laid out so that each warp's stage is one contiguous 2 KiB piece
//          (what a load-time reordering of the weights would give).
// and "rows" once more over random bytes (the other buffers are memset). On the H200 (2026-12-04)
// all three read a 24576x4096 bf16 matrix in ~48 us (98-101% of copy bandwidth): neither the
// layout nor the data holds the decode matmul (72 us for the same matrix) back; gemv_alone.cu
// times the two kernels side by side.
//
// Not part of the build (a measuring tool, like launch_floor.cu):
//   nvcc -O3 -std=c++17 -arch=sm_90 -o weight_stream tools/gpu/weight_stream.cu && ./weight_stream
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "gpu_timing.cuh"
#include "weight_stream.cuh"

using namespace wstream;

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
  uint8_t *r0, *r1;
  CHECK(cudaMalloc(&r0, max_bytes));
  CHECK(cudaMalloc(&r1, max_bytes));
  fill_random<<<1024, 256>>>(reinterpret_cast<uint32_t*>(r0), max_bytes / 4, 1);
  fill_random<<<1024, 256>>>(reinterpret_cast<uint32_t*>(r1), max_bytes / 4, 2);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMalloc(&sink, 4));
  const double copy = copy_gbs(s, w1, w0, max_bytes);
  std::printf("copy bandwidth %.1f GB/s\n", copy);
  const int smem = kRingBytes;
  CHECK(cudaFuncSetAttribute(stream_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             smem));
  CHECK(
      cudaFuncSetAttribute(stream_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  std::printf("%8s %8s %8s %10s %10s %9s\n", "N", "K(bf16)", "layout", "us/call", "GB/s",
              "of copy");
  const int64_t shapes[][2] = {
      {24576, 4096}, {4096, 4096}, {6144, 4096}, {4096, 12288}, {12288, 2048}};
  for (const auto& sh : shapes) {
    const int64_t N = sh[0], row_bytes = sh[1] * 2, bytes = N * row_bytes;
    if (static_cast<size_t>(bytes) > max_bytes) continue;
    // rows and tiles over memset buffers, then rows over random bytes.
    for (int mode : {0, 1, 2}) {
      const bool tiles = mode == 1;
      uint8_t* a = mode == 2 ? r0 : w0;
      uint8_t* b = mode == 2 ? r1 : w1;
      int flip = 0;
      const float us = graph_us(s, 20, [&] {
        const uint8_t* w = (flip++ & 1) ? b : a;  // alternate so L2 never holds the matrix
        if (tiles) {
          stream_kernel<true><<<N / 64, kWarps * 32, smem, s>>>(w, row_bytes, sink);
        } else {
          stream_kernel<false><<<N / 64, kWarps * 32, smem, s>>>(w, row_bytes, sink);
        }
      });
      const double gbs = bytes / (us * 1e-6) / 1e9;
      const char* name = mode == 0 ? "rows" : mode == 1 ? "tiles" : "rows-rnd";
      std::printf("%8lld %8lld %8s %10.2f %10.1f %8.1f%%\n", static_cast<long long>(N),
                  static_cast<long long>(sh[1]), name, us, gbs, 100.0 * gbs / copy);
    }
  }
  return 0;
}
