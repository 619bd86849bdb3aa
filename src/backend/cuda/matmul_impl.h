// Private to the CUDA matmul files (matmul.cu: SIMT kernel and dispatch, matmul_mma.cu: tensor
// cores, moe.cu: grouped experts). What one product needs, whichever kernel runs it.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/cuda/common.cuh"

namespace hibana::cuda::mm {

// One weight matrix (or one expert's) as the kernels read it.
struct MatPtr {
  const void* w;
  const void* scale;  // null when unscaled
};

struct Params {
  int64_t N, K;
  int64_t ldw;     // weight row stride, elements
  int scale_kind;  // 0 none, 1 f32, 2 bf16
  int64_t scale_ld, block_rows, block_cols;
  const float* x;
  int64_t ldx;
  float* out;
  int64_t ldo;
  int64_t M;  // rows of x (plain) or of out (grouped: tokens * k)
  int64_t split_len;
  int splits;
  float* partial;     // [splits][M][N] for split-parallel launches with splits > 1
  int* counters;      // per output tile: splits finished (the last one reduces, resets)
  bool vec_w, vec_x;  // 16-byte loads allowed
  // Plain launches read `single`; grouped launches read mats[group] and take their rows from
  // group_rows[group_offset[g] .. group_offset[g + 1]): out row r, x row r / x_div.
  MatPtr single;
  const MatPtr* mats;
  const int32_t* group_offset;
  const int32_t* group_rows;
  int x_div;
  // Grouped launches run one grid slice per non-empty group: slice z serves group active[z],
  // slices past *n_active have nothing to do.
  const int32_t* active;
  const int32_t* n_active;
  // Grouped launches of the tiled kernel: slice z's first tile of kTiledTokens rows among all
  // slices' tiles ([*n_active + 1], ascending); a CTA takes one tile of that list.
  const int32_t* tile_start;
  // Grouped launches serve only groups of rows_min to rows_max rows (0: no bound); the other
  // groups are another launch's (run_mma gives groups of up to 8 rows to the decode kernel).
  int64_t rows_min, rows_max;
  // Grouped launches: the routing (active, n_active, group_offset, group_rows) was written by a
  // kernel before the previous one, so it is visible before this kernel's pdl_wait: a CTA of
  // the previous kernel launches this one only after its own pdl_wait, i.e. once the routing's
  // writer has finished. The decode kernel then reads it (from L2: group_of_slice) and starts
  // its weight copies early. (PTX promises visibility to the grid that waits; that a launch
  // after the previous grid's waits sees it too is our reading of the model, not its text.)
  bool routing_ready;
  // Grouped decode launches of one token's pairs (M == x_div, so every group's x row is 0): the
  // activations were written before the previous kernel's wait (two or more launches back, as
  // the experts' gate/up input is: the router's product and the routing come between), so the
  // kernel may read and split them before its own wait, before it knows its group. (The same
  // reading of the launch order as routing_ready's.)
  bool x_early;
  // Grouped decode launches with x_early (slice_known false otherwise): slice known_slice's
  // matrix and its one row are known on the host (the shared expert folded in as the set's
  // last expert: at one token always the last slice, of the token's last pair). Its CTAs read
  // nothing the routing writes, so they stream and multiply before the kernel's wait, while
  // the routing runs, and wait only before they store. They release the next kernel before
  // their wait (the one exception to release_early's rule below): the other slices' CTAs, of
  // which there is at least one (the token's routed pairs), release only after their own
  // wait, and the next kernel launches once every CTA has released or exited.
  bool slice_known;
  int known_slice, known_row;
  MatPtr known_mat;
  // SwiGLU (decode kernel only; 0 otherwise): the weight is [gate ; up] with N = 2 * pair rows,
  // and out[m, j] = silu(row j's sum) * (row j + pair's sum) for j < pair.
  int64_t pair;
  // Decode kernel: release the next kernel as soon as this one has waited for the previous one
  // (the default; HIBANA_CUDA_EARLY_RELEASE=0: once its loads are done), so the next kernel's
  // weight copies can overlap this one's stream where SM slots are free. Never before this kernel's
  // own wait (save a known slice's CTAs: slice_known): routing_ready relies on a launch following
  // its predecessor's wait.
  bool release_early;
  // Decode kernel, plain products of one token a sequence (null otherwise): output columns below
  // conv_cols also go through the DeltaNet's conv (conv_impl.cuh, kernel size conv_k up to
  // kFusedConvTaps) into conv_out, row m being sequence m: its carried window in conv_states at
  // slot conv_slots[m] (none: a zero output), a snapshot at conv_snaps[m] (matmul_conv).
  const float* conv_w;
  int conv_k;
  int64_t conv_cols;
  float* conv_states;
  const int32_t* conv_slots;
  const int32_t* conv_snaps;
  float* conv_out;
  int64_t ldco;
  // Tiled kernel with the activations split beforehand (HIBANA_CUDA_TILED_PRESPLIT, null
  // otherwise): x's rows as three planes of bf16 terms (h, m, l: x = h + m + l, split3's),
  // split_plane elements apart, rows ld_split elements long (K rounded up to a stage, zeros
  // past K), written by run_tiled before the product.
  const uint16_t* xsplit;
  int64_t ld_split, split_plane;
  // Tiled kernel: its pipeline depth (set by its launch from the GPU's shared memory), and
  // whether a warp skips the products of its n8 token tiles past the tile's rows (an expert's
  // ~10 rows in a 64-token tile).
  int tiled_depth;
  bool tiled_skip;
  // Grouped launches (the MoE experts in a pass with prefill rows, unless
  // HIBANA_CUDA_GROUPED_PREFILL=3; null otherwise): prefill_mask[token] != 0 where the token's rows
  // (short rows) carry only the activations' first prefill_terms bf16 terms, 1 or 2 (out row r is
  // token r / token_div's). moe.cu rounds such rows' activations to those terms before the launch,
  // so every kernel finds their other terms zero (exact zeros added: a row's bits depend neither on
  // the kernel its group lands in nor on the rows beside it); the tiled kernel skips those terms'
  // products in a tile of short rows alone.
  const uint8_t* prefill_mask;
  int prefill_terms;
  int64_t token_div;
};

// The largest conv kernel the decode matmul applies (its windows sit in registers).
constexpr int kFusedConvTaps = 5;

// True when a grouped launch leaves a group of `rows` rows to another launch.
__device__ __forceinline__ bool not_my_group(const Params& p, int64_t rows) {
  return rows < p.rows_min || (p.rows_max > 0 && rows > p.rows_max);
}

// Rows of x per CTA of the tiled kernel (matmul_tiled.cu).
constexpr int kTiledTokens = 64;

// The group a grouped launch's slice serves, or -1. Both loads issue at once (active has an
// entry for every slice; past *n_active it is not used): one round trip, not two, before the
// group's offsets and matrix can be read. The routing is read from L2, never L1 (each layer's
// routing likely sits at the previous layer's addresses, and a routing_ready launch reads it
// before its pdl_wait).
__device__ __forceinline__ int group_of_slice(const Params& p) {
  const int z = blockIdx.z;
  const int n = __ldcg(p.n_active), g = __ldcg(p.active + z);
  return z < n ? g : -1;
}

// Where the activations of each of a CTA's n token rows from m0 start (its x row times x_ld:
// the kernels' copies add k to it, one product a row and CTA instead of one a copy and stage)
// and its out row (both -1 past the group's rows); grouped launches read them from the group's
// row list (out row r, x row r / x_div).
template <bool kGrouped>
__device__ __forceinline__ void fill_rows(const Params& p, const int32_t* rows, int64_t m0,
                                          int64_t rows_here, int n, int64_t x_ld, int64_t* x_at,
                                          int64_t* o_row) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t m = m0 + i;
    if (m >= rows_here) {
      x_at[i] = o_row[i] = -1;
    } else if constexpr (kGrouped) {
      o_row[i] = rows[m];
      x_at[i] = rows[m] / p.x_div * x_ld;
    } else {
      o_row[i] = m;
      x_at[i] = m * x_ld;
    }
  }
}

// Entry i of a weight's block scales (f32 or bf16).
__device__ __forceinline__ float scale_entry(const Params& p, const void* scale, int64_t i) {
  if (p.scale_kind == 1) return static_cast<const float*>(scale)[i];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(scale)[i]);
}

__device__ __forceinline__ float scale_at(const Params& p, const void* scale, int64_t n,
                                          int64_t k) {
  return scale_entry(p, scale, (n / p.block_rows) * p.scale_ld + k / p.block_cols);
}

// The block scales of a thread's R weight rows as its chunks advance through K in order from
// k_first, in chunks whose ends include every block's end (block_cols a multiple of the chunk:
// mma_supports): the tiled and mma kernels' folds. The current block's entries are running
// indices and its end a running k, where scale_at took two 64-bit divisions a row and fold and
// the fold's test a 64-bit remainder a chunk (each a long emulated sequence: the grouped fp8
// tiled kernel's PTX had 21 divisions, the bf16 one's 40), and each block's scales are loaded
// when the block before it ends, a block ahead of their fold, not as a round trip inside it.
// The same entries scale_at reads: the same bits.
template <int R>
struct BlockScales {
  int64_t at[R];  // the current block's entry of each row, or -1 (a row past N: scale 0)
  float s[R];     // the current block's scales
  int64_t end;    // k where the current block ends

  __device__ void start(const Params& p, const void* scale, const int64_t (&row)[R], int64_t N,
                        int64_t k_first) {
    const int64_t kb = k_first / p.block_cols;
#pragma unroll
    for (int r = 0; r < R; ++r) at[r] = row[r] < N ? row[r] / p.block_rows * p.scale_ld + kb : -1;
    end = (kb + 1) * p.block_cols;
    load(p, scale);
  }
  __device__ void load(const Params& p, const void* scale) {
#pragma unroll
    for (int r = 0; r < R; ++r) s[r] = at[r] >= 0 ? scale_entry(p, scale, at[r]) : 0.0f;
  }
  // The chunk ending at cend ended the current block: the next one's scales, where it starts
  // before K.
  __device__ void next(const Params& p, const void* scale) {
#pragma unroll
    for (int r = 0; r < R; ++r) at[r] += at[r] >= 0 ? 1 : 0;
    if (end < p.K) load(p, scale);
    end += p.block_cols;
  }
};

// Split-parallel launches: after every thread of the CTA has stored its
// partial sums, true in the CTA that finished its tile last, which then adds the tile's splits
// in split order (and leaves the counter at zero for the next launch).
// One thread counts, with an acquire-release atomic after the barrier, as the cooperative
// groups' grid barrier does: the barrier orders the CTA's stores before the release, and the
// acquire (with the barrier after it) orders every split's stores before the reducing CTA's
// loads (L2 loads: split_sums). A __threadfence in every thread cost the decode kernel's
// epilogue a memory barrier per thread (ncu: 4-11% of its stall samples).
// No static shared memory (the answer travels by __syncthreads_or): a kernel that asks for the
// GPU's whole opt-in shared memory as dynamic memory could not have any, and static memory
// would shift its dynamic memory off the 128-byte line its cp.async copies need.
__device__ __forceinline__ bool last_to_finish(int* counter, int splits) {
  __syncthreads();  // every thread's partials are stored before the count
  int before = -1;
  if (threadIdx.x == 0) {
    asm volatile("atom.add.acq_rel.gpu.s32 %0, [%1], 1;" : "=r"(before) : "l"(counter) : "memory");
  }
  const bool last = __syncthreads_or(before == splits - 1);
  if (last && threadIdx.x == 0) *counter = 0;
  return last;
}

// The reducing CTA's sums of kOut output elements over a launch's splits: element i's partial
// of split s at partial[s * stride + elem[i]]. The adds run in split order (sum = p0, sum +=
// p1, ...), but kHeld splits' loads of every element are issued before any is added, so up to
// kHeld splits the reduction costs one round trip to L2, not one per split and element (a
// loop of dependent loads and adds, branching per element, serialised them). Splits past the
// last load the last one again (in bounds, not added).
template <int kOut>
__device__ __forceinline__ void split_sums(const float* partial, const int64_t (&elem)[kOut],
                                           int64_t stride, int splits, float (&sum)[kOut]) {
  constexpr int kHeld = 8;
  for (int s0 = 0; s0 < splits; s0 += kHeld) {
    float part[kOut][kHeld];
#pragma unroll
    for (int i = 0; i < kOut; ++i) {
#pragma unroll
      for (int s = 0; s < kHeld; ++s) {
        part[i][s] = __ldcg(partial + min(s0 + s, splits - 1) * stride + elem[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < kOut; ++i) {
#pragma unroll
      for (int s = 0; s < kHeld; ++s) {
        if (s0 + s == 0) {
          sum[i] = part[i][s];
        } else if (s0 + s < splits) {
          sum[i] = sum[i] + part[i][s];
        }
      }
    }
  }
}

// For a split-parallel launch of tiles of `bn` weight rows x `bm` x rows: the partial sums
// ([splits][M][N]) and the zeroed per-tile counters (each reducing CTA resets its own) that
// p points at while the returned scratch lives.
std::unique_ptr<Scratch> split_scratch(Params& p, int64_t bn, int64_t bm, int64_t max_rows,
                                       int groups);

// `count` zeroed counters for last_to_finish, shared with the split-parallel launches (each
// user resets its own before it ends: kernels that use them run one after another).
int* finish_counters(size_t count);

// Fills the weight / activation fields of p.
void describe_weight(const Weight& w, Params& p);
void describe_x(const Tensor& x, Params& p);

// Runs one (plain or grouped) product; `max_rows` bounds the rows of any group. Chooses the
// kernel family from the weight alone (never from the batch), so a row's bits do not depend on
// the batch it is in.
void run(Params p, Elt elt, bool grouped, int64_t max_rows, int groups);

// Tensor-core path (matmul_mma.cu): bf16 and fp8 weights with 16-byte aligned rows.
bool mma_supports(const Params& p, Elt elt);
// Whether a SwiGLU launch (Params::pair) of this weight can run: only the decode kernel has it,
// so up to 8 rows per group and a weight the tensor-core kernels take.
inline bool swiglu_fits(const Params& p, Elt elt, int64_t max_rows) {
  return max_rows <= 8 && mma_supports(p, elt);
}
void run_mma(const Params& p, Elt elt, bool grouped, int64_t max_rows, int groups);

// Decode path (matmul_gemv.cu): the same products for up to 8 rows per group (max_rows),
// streaming the weights through warp-private rings with no barrier in the loop.
void run_gemv(Params& p, Elt elt, bool grouped, int64_t max_rows, int groups);

// Tiled tensor-core path for large batches (matmul_tiled.cu), the same arithmetic as run_mma's:
// weights it supports plus 16-byte aligned activation rows (and, grouped, the tile list), where
// two of its stages fit the GPU's shared memory per block (smem_per_block).
bool tiled_supports(const Params& p, Elt elt, bool grouped);
void run_tiled(const Params& p, Elt elt, bool grouped, int64_t max_rows, int groups);

}  // namespace hibana::cuda::mm
