// The ring way for tools/gpu/op_chain.cu (included there after its helpers): one CTA per SM
// walks its (op, tile) pairs in op order as one cp.async pipeline. Its shared memory holds
// kRingTiles tiles, and the weights of the next kRingTiles - 1 tiles are always on their way,
// across op boundaries. A dependency therefore stalls only the arithmetic, never the weight
// stream. Before each tile's arithmetic the CTA waits, as the persistent way does, for the
// previous op's completion counter. The tile's bytes go through the same compute_tile, so the
// outputs must equal the graph's. (cp.async.cg keeps L2's normal policy where load_tile's __ldcs
// asks for evict-first: a weight byte is read once either way.) Tile t of op i belongs to CTA (t + rot_i) mod grid, where
// rot_i is the sum of the tiles of ops before i: consecutive ops' (and the one-CTA ops') tiles
// start where the previous op's ended.
#pragma once

constexpr int kRingTiles = 6;                       // 6 x 32 KiB of shared memory per CTA
constexpr int kTileBytes = kWarps * kWarpBytes;     // a tile's weights are contiguous
constexpr int kRingSmem = kRingTiles * kTileBytes;  // dynamic shared memory of ring_kernel

// This CTA's next (op, tile), in op order.
struct RingCursor {
  int op = 0, tile = -1, rot = 0;
  __device__ void advance(const Op* ops, int n_ops) {
    tile = tile < 0 ? -1 : tile + static_cast<int>(gridDim.x);
    while (op < n_ops) {
      if (tile < 0) {  // the first tile of op `op` that is this CTA's
        tile = (static_cast<int>(blockIdx.x) - rot % static_cast<int>(gridDim.x) +
                static_cast<int>(gridDim.x)) %
               static_cast<int>(gridDim.x);
      }
      if (tile < ops[op].tiles) return;
      rot = (rot + ops[op].tiles) % static_cast<int>(gridDim.x);
      ++op;
      tile = -1;
    }
  }
  __device__ bool valid(int n_ops) const { return op < n_ops; }
};

__device__ __forceinline__ void ring_load(const Op& op, int tile, char* slot) {
  if (op.norm) return;
  const int64_t row_bytes = static_cast<int64_t>(op.k) * 2;
  const char* base = reinterpret_cast<const char*>(op.w) + static_cast<int64_t>(tile) * kTileBytes;
  const unsigned dst0 = static_cast<unsigned>(__cvta_generic_to_shared(slot));
#pragma unroll
  for (int j = 0; j < kTileBytes / 16 / kThreads; ++j) {
    const int c = j * kThreads + static_cast<int>(threadIdx.x);
    const int64_t row = (static_cast<int64_t>(tile) * kTileBytes + c * 16) / row_bytes;
    const int n = row < op.n ? 16 : 0;  // rows past the matrix: zeros, as load_tile reads them
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst0 + c * 16),
                 "l"(base + (n ? c * 16 : 0)), "r"(n)
                 : "memory");
  }
}

__global__ void __launch_bounds__(kThreads)
    ring_kernel(const Op* ops, int n_ops, unsigned* done, unsigned epoch) {
  extern __shared__ __align__(16) char ring[];
  __shared__ float xs[kMaxK];
  RingCursor load, use;
  load.advance(ops, n_ops);
  use.advance(ops, n_ops);
#pragma unroll 1
  for (int s = 0; s < kRingTiles - 1; ++s) {  // prologue: a group per slot, empty past the end
    if (load.valid(n_ops)) {
      ring_load(ops[load.op], load.tile, ring + s * kTileBytes);
      load.advance(ops, n_ops);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
#pragma unroll 1
  for (int k = 0; use.valid(n_ops); ++k) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kRingTiles - 2) : "memory");
    __syncthreads();  // tile k's bytes are in its slot, for every thread
    // The slot of the previous iteration (read by every thread before its last barrier) takes
    // the tile kRingTiles - 1 ahead, before the dependency wait: kRingTiles - 1 tiles stream
    // while this one waits.
    if (load.valid(n_ops)) {
      ring_load(ops[load.op], load.tile, ring + ((k + kRingTiles - 1) % kRingTiles) * kTileBytes);
      load.advance(ops, n_ops);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    const Op op = ops[use.op];
    if (use.op > 0 && threadIdx.x == 0) {
      const unsigned want = epoch * static_cast<unsigned>(ops[use.op - 1].tiles);
      unsigned got;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];"
                     : "=r"(got)
                     : "l"(done + (use.op - 1) * kCounterStride)
                     : "memory");
      } while (got < want);
    }
    __syncthreads();
    load_x(op, xs);
    if (op.norm) {
      norm_op(op, xs);
    } else {
      const char* slot = ring + (k % kRingTiles) * kTileBytes + (threadIdx.x / 32) * kWarpBytes;
      uint4 w[kLaneChunks];
#pragma unroll
      for (int j = 0; j < kLaneChunks; ++j) {
        w[j] = *reinterpret_cast<const uint4*>(slot + (j * 32 + threadIdx.x % 32) * 16);
      }
      compute_tile(op, use.tile, w, xs);
    }
    __syncthreads();  // every store of the tile, and every read of its slot, before what follows
    if (threadIdx.x == 0) {
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(done + use.op * kCounterStride)
                   : "memory");
    }
    use.advance(ops, n_ops);
  }
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}
