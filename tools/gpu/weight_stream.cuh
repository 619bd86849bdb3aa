// The weight-stream kernel of tools/gpu/weight_stream.cu, shared with gemv_alone.cu: a kernel
// shaped like gemv_kernel.cuh (4 warps per CTA, 16 weight rows per warp, each lane copying
// 16-byte pieces with cp.async into a warp-private ring, D - 1 stages in flight) that only folds
// what lands into a checksum.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace wstream {

constexpr int kWarps = 4, kStageBytes = 2048, kDepth = 6;  // per warp: 12 KiB of ring
constexpr int kRingBytes = kWarps * kDepth * kStageBytes;  // per CTA

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
__device__ __forceinline__ void stream_rows(const uint8_t* w, int64_t row_bytes, unsigned* sink);
template <bool kTiles>
__global__ void __launch_bounds__(kWarps * 32)
    stream_kernel(const uint8_t* w, int64_t row_bytes, unsigned* sink) {
  stream_rows<kTiles>(w, row_bytes, sink);
}

// The same over up to kTableMats matrices: grid z streams matrix mats[z] (the experts one MoE
// decode step reads, wherever they lie).
constexpr int kTableMats = 16;
struct MatTable {
  const uint8_t* w[kTableMats];
};
__global__ void __launch_bounds__(kWarps * 32)
    stream_table_kernel(MatTable t, int64_t row_bytes, unsigned* sink) {
  stream_rows<false>(t.w[blockIdx.z], row_bytes, sink);
}

template <bool kTiles>
__device__ __forceinline__ void stream_rows(const uint8_t* w, int64_t row_bytes, unsigned* sink) {
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

// Random-looking bytes (as real weights are), against the memset-filled buffers.
__global__ void fill_random(uint32_t* w, int64_t words, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < words;
       i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    w[i] = h;
  }
}

}  // namespace wstream
