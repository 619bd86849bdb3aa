// The ring way for tools/gpu/op_chain.cu (included there after its helpers): one CTA per SM
// walks its (op, tile) pairs in op order as one cp.async pipeline. Its shared memory holds
// kRingTiles tiles, and the weights of the next kRingTiles - 1 tiles are always on their way,
// across op boundaries. A dependency therefore stalls only the arithmetic, never the weight
// stream. Before its first tile of an op the CTA waits, as the persistent way does, for the
// previous op's completion counter and reads the op's input into shared memory; after its last
// tile of the op it adds its count of the op's tiles to the op's counter. (The first version
// did both per tile: ~3 round trips to L2 a tile, 17.5% of copy bandwidth on the H200.) The
// tile's bytes go through the same compute_tile, so the outputs must equal the graph's.
// (cp.async.cg keeps L2's normal policy where load_tile's __ldcs asks for evict-first: a weight
// byte is read once either way.) Tile t of op i belongs to CTA (t + rot_i) mod grid, where rot_i
// is the sum of the tiles of ops before i: consecutive ops' (and the one-CTA ops') tiles start
// where the previous op's ended.
#pragma once

// Tiles of 32 KiB per CTA (RING_TILES=N at compile time): the weights in flight per SM are
// kRingTiles - 1 tiles. Every byte in flight is a byte the CTA's own dependency traffic (the
// poll of a counter, the read of an input) may queue behind: 6 tiles per SM are ~25 MB across
// the GPU, ~6 us of the copy bandwidth.
#ifndef RING_TILES
#define RING_TILES 6
#endif
constexpr int kRingTiles = RING_TILES;
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

// Has op `op`'s every tile of run `epoch` been counted? (acquire: its outputs are visible.)
__device__ __forceinline__ bool op_done(const Op* ops, int op, const unsigned* done,
                                        unsigned epoch) {
  unsigned got;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];"
               : "=r"(got)
               : "l"(done + op * kCounterStride)
               : "memory");
  return got >= epoch * static_cast<unsigned>(ops[op].tiles);
}

// cp.async.wait_group takes an immediate: the groups a wait may leave in flight, 0..kRingTiles-1.
__device__ __forceinline__ void wait_groups_left(int n) {
  switch (n) {
    case 0: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;\n" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;\n" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 6;\n" ::: "memory"); break;
  }
}
static_assert(kRingTiles >= 2 && kRingTiles <= 6,  // (7 x 32 KiB + xs: past 227 KiB)
              "wait_groups_left covers 0..kRingTiles-1 groups in flight");

// kRouted: an expert's weights are loaded only once its router is done (an engine learns which
// experts from the router's output), the way a persistent decode step would have to. A load
// whose router is not done yet is not issued (a blocking wait there could stall this CTA's own
// router tile behind it in the ring): the loads stop at it and are retried before every tile;
// when this CTA's arithmetic reaches the tile, it waits for the router and loads it then.
// Without kRouted every load is issued as early as the ring has room (the bound a step with
// known experts could reach).
template <bool kRouted>
__global__ void __launch_bounds__(kThreads)
    ring_kernel(const Op* ops, int n_ops, unsigned* done, unsigned epoch) {
  extern __shared__ __align__(16) char ring[];
  __shared__ __align__(16) float xs[kMaxK];
  __shared__ int ready;
  RingCursor load, use;
  load.advance(ops, n_ops);
  use.advance(ops, n_ops);
  int issued = 0;  // tiles whose loads are committed (one cp.async group each)
  // Commits the loads of the next tile into its slot (the ring's slot for tile `issued`).
  auto issue = [&] {
    ring_load(ops[load.op], load.tile, ring + (issued % kRingTiles) * kTileBytes);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    load.advance(ops, n_ops);
    ++issued;
  };
  // May the next load go now? (Every thread gets thread 0's answer; a barrier inside.)
  auto loadable = [&] {
    if (!kRouted || !ops[load.op].routed) return true;
    if (threadIdx.x == 0) ready = op_done(ops, ops[load.op].router, done, epoch);
    __syncthreads();
    const bool r = ready != 0;
    __syncthreads();
    return r;
  };
  // The op whose tiles this CTA works on, and how many of them it has done: the count goes to
  // the op's counter once, after its last tile here (one release per op, not per tile), and the
  // op's input is waited for and read into xs once, before its first tile here.
  int cur = -1;
  unsigned mine = 0;
#pragma unroll 1
  for (int k = 0; use.valid(n_ops); ++k) {
    // Every slot but tile k's is free (read by every thread before the last barrier): fill the
    // ring up to kRingTiles - 1 tiles ahead, stopping at a routed tile whose router is not done.
    while (load.valid(n_ops) && issued < k + kRingTiles && loadable()) issue();
    if (issued == k) {  // tile k's own loads wait for its router: nothing of this CTA is ahead
      if (threadIdx.x == 0) {
        while (!op_done(ops, ops[load.op].router, done, epoch)) {
        }
      }
      __syncthreads();
      issue();
    }
    wait_groups_left(issued - k - 1);
    const Op op = ops[use.op];
    if (use.op != cur) {
      cur = use.op;
      if (use.op > 0 && threadIdx.x == 0) {
        while (!op_done(ops, use.op - 1, done, epoch)) {
        }
      }
      __syncthreads();  // (also: tile k's bytes are in its slot, for every thread)
      load_x(op, xs);   // its own barrier at the end
    } else {
      __syncthreads();  // tile k's bytes are in its slot, for every thread
    }
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
    __syncthreads();  // every store of the tile, and every read of its slot and of xs
    ++mine;
    use.advance(ops, n_ops);
    if (!use.valid(n_ops) || use.op != cur) {  // this CTA's last tile of the op
      if (threadIdx.x == 0) {
        asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(done + cur * kCounterStride),
                     "r"(mine)
                     : "memory");
      }
      mine = 0;
    }
  }
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}
