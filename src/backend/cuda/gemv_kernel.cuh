// Private to matmul_gemv.cu (its launches choose among these kernels): the decode matmul's
// kernel, its rings and stages.
//
// Decode matmul: out = x · wᵀ for up to 8 token rows (per group), bf16 or fp8 weights, on the
// tensor cores with the same arithmetic as matmul_mma.cu and matmul_tiled.cu (the same splits,
// the same mma sequence per output element, the same three-term split of the activations), so
// a token's bits do not depend on which kernel served its batch.
//
// Built to stream the weights with nothing in the way: each lane copies its 16 bytes of rows
// g and g + 8 per chunk with cp.async into its own slots of a warp-private ring (D - 1 stages
// in flight). No lane reads weights another copied, so the main loop has no barrier of any
// kind; warps run independently, and the only CTA-wide steps are the activations' split before
// the loop and the split-K reduction at the end.
//
// Activations: where a split's rows fit in kXSharedMax (at batch 1 they do for every matrix of
// the 8B and 80B shapes) and the extra shared memory does not cost the grid a second wave, the
// CTA splits them into their bf16 terms once, into shared memory, behind one barrier; each
// lane reads its B fragments from there (two words per term and k16 product). Otherwise each
// lane loads those of its token, at the k positions of its weight bytes, from global memory
// (they sit in L2) one stage ahead into registers and splits them itself — the same terms,
// four times over per CTA. Up to 2 rows, one mma carries all three terms (kPacked, below).
// The loop's bookkeeping is 32-bit offsets from the split's start, and the block scales are
// read from a running index instead of two divisions per chunk. On the H200 these took a
// 12288x2048 fp8 product at batch 1 from 30.1 to 23.2 us, and the shared activations to
// 19.1 us (docs/benchmarks.md, seventh slice): the old loop issued 463 instructions per 1 KiB
// stage (ncu) and was bound by their latency, not by DRAM.
//
// What a warp does once costs as much as its loop on the 80B's small products (ncu on 12352x2048
// fp8 at batch 1, 16 stages a warp: ~40% of the stall samples before the loop, ~900
// instructions a warp): the grid has no token tiles (no division for them), the activations'
// split takes as many loads in flight as a thread has items and finds an item's row without an
// integer division, the scale indices use 32-bit divisions, the block scales load a block
// ahead, and one thread counts a finished split (last_to_finish). 12352x2048 fp8 at batch 1
// went from 16.2 to 14.4 us, 2048x4096 from 8.7 to 7.7, the 80B decode step 7% faster
// (docs/benchmarks.md, fourteenth slice).
//
// With programmatic dependent launch the weight ring starts filling before the kernel waits
// for the previous one (plain matrices: the weights are constants; grouped ones only where
// their routing is older than the previous kernel, Params::routing_ready), and the next kernel
// is released once every CTA has waited for the previous one (Params::release_early: the next
// kernel's weight copies overlap this one's stream where SM slots are free; +1.7% on the 80B's
// decode step at batch 1; HIBANA_CUDA_EARLY_RELEASE=0 releases it after the loop instead).
//
// Measured against the kernel it replaced (one barrier per stage; docs/benchmarks-history.md,
// fifth slice): no faster per call — what a call costs beyond its bytes is start-up and the split
// reduction, not the barrier. A variant copying 256 contiguous bytes per row and stage (row-
// contiguous DRAM access, 3 CTAs per SM) was slower: 46% of copy bandwidth on 24576x4096
// against 62%.
//
// The ring must start 128-byte aligned in shared memory (the __align__ below): the finish's
// static `last` flag put the dynamic shared memory 16 bytes past a 128-byte line, and a
// cp.async whose shared destination is not aligned like its global source within the 32-byte
// sector costs two L2 sector reads instead of one (ncu: 32 sectors per warp copy instead of
// 16). Misaligned, 24576x4096 bf16 took 72-74 us; aligned, 50.5 us, 94% of copy bandwidth
// (tools/gpu/gemv_alone.cu; docs/benchmarks.md, tenth slice).
#pragma once

#include <cassert>
#include <type_traits>

#include "backend/cuda/gemv_finish.cuh"
#include "backend/cuda/gemv_prologue.cuh"
#include "backend/cuda/matmul_impl.h"
#include "backend/cuda/mma_common.cuh"

namespace hibana::cuda::mm {

constexpr int kWarps = 4;
constexpr int kRowsPerCta = 16 * kWarps;
// kCtaSplits > 1: one CTA runs all of a product's splits (2, 3, 4 or 8), a warp each, and adds
// them itself in split order, through shared memory, instead of writing partials that the
// tile's last CTA reads back from L2 (last_to_finish, split_sums: two L2 round trips on the
// chain). Its warps are kCtaSplits splits of kCtaWarps / kCtaSplits row groups of 16 rows
// (2 x 2, 1 x 3, 1 x 4, 1 x 8). The same splits, the same sums in the same order: the same
// bits. Plain products take it, and grouped fp8 SwiGLU (an MoE layer's gate/up) in 2 splits,
// or in 4 at one token (matmul_gemv.cu).
constexpr int cta_warps(int cta_splits) {
  return cta_splits >= kWarps ? cta_splits : kWarps / cta_splits * cta_splits;
}
// Bytes of a warp's weight ring. fp8 takes 6 KiB, the least its stages allow (three of 2
// KiB): against 12 KiB the 80B's decode step ran 1.029-1.031 times as fast at batch 1 and
// 1.082-1.085 at batch 8, and 16 KiB 0.969 / 0.925. bf16 keeps 12 KiB up to 2 rows (the packed
// kernels): the 8B at batch 1 ran 0.968 times as fast with 6. Above 2 rows it takes 6 KiB too:
// the 8B at batch 8 ran 1.029 times as fast (H100, docs/benchmarks.md, eighteenth slice).
template <Elt E, bool kPacked>
constexpr int kRingPerWarp = E == Elt::fp8 ? 6 << 10 : kPacked ? 12 << 10 : 6 << 10;
// The ring where the shared activations fit the grid in one wave only beside a smaller ring
// (the 8B's down projection at batch 1: 512 CTAs, 4 per SM with 10 KiB rings, 3 with 12 KiB;
// the whole 8B step 2.7% faster on the H200, docs/benchmarks.md, thirteenth slice). Where the
// large ring fits, the small one measured slower (1.3% of that step in all). A 6 KiB ring is
// already the least.
template <Elt E, bool kPacked>
constexpr int kSmallRingPerWarp = E == Elt::bf16 && kPacked ? 10 << 10 : kRingPerWarp<E, kPacked>;

// kWide: 128 k per pipeline stage instead of 64 — two chunks of fp8 per wait, whose
// conversions the compiler may interleave (one chunk's chain per stage left the warp waiting on
// each instruction: ncu, 5.5 cycles per issue). fp8 weights with shared activations take them
// (a lane's own activations for a stage would take 64 registers): the 80B decode 1.3% faster at
// batch 1, 12352x2048 fp8 14.2 -> 13.4 us (docs/benchmarks.md, fourteenth slice).
template <Elt E, int kRing, bool kWide = false>
struct Gemv {
  static constexpr int esize = EltInfo<E>::size;
  static constexpr int kStageK = kWide ? 128 : 64;  // k per pipeline stage
  static constexpr int VE = 16 / esize;             // weight elements per 16-byte copy
  static constexpr int KC = 4 * VE;                 // k per chunk (the 4 lanes of a row)
  static constexpr int U = kStageK / KC;            // chunks per stage
  static constexpr int MMAS = VE / 4;               // k16 products per chunk
  static constexpr int kLaneCopies = 2 * U;         // 16-byte copies of a lane per stage
  static constexpr int kStageBytes = kLaneCopies * 32 * 16;
  static constexpr int D = kRing / kStageBytes;  // ring depth in stages
  static constexpr int kXPerStage = U * VE;      // activations of a lane per stage
  static constexpr int kSmem = kWarps * kRing;
  static_assert(D >= 3 && kXPerStage == kStageK / 4, "ring shape");
  // Split activations in shared memory (kXShared): per token row three planes, the h, m and
  // l terms, each two words (bf16x2 of elements 01 and 23) per 4 k; planes padded so that the 8
  // lanes of an LDS.128 phase hit distinct banks (lanes 4 apart read planes 1 or 3 apart).
  static __host__ __device__ constexpr int plane_pitch_bytes(int64_t split_len) {
    const int64_t bytes = (split_len + KC - 1) / KC * KC / 4 * 8;
    const int64_t target = esize == 1 ? 16 : 64;
    return static_cast<int>(bytes + (target - bytes % 128 + 128) % 128);
  }
};

// Whether a kernel with this ring takes kWide's stages: fp8 with shared activations, where the
// ring holds three of them (2 KiB each). A smaller fp8 ring (tools/gpu/check.sh ring-sweep with
// RINGS 4 or 5) takes the 1 KiB stages instead.
template <Elt E, int kRing, bool kXShared>
constexpr bool kWideStages = kXShared && E == Elt::fp8 && kRing >= 3 * (2 << 10);

// The most shared memory the split activations may take: three CTAs still fit on an SM.
constexpr int kXSharedMax = 26 << 10;

// kXShared: the CTA splits its x_rows activation rows for the whole split into shared memory
// once, before the loop (each warp would otherwise split the same activations again); used
// where that fits in kXSharedMax. Both ways give the same B fragments.
//
// kRows: the most activation rows a group has, 1, 2 or 8 — each a kernel of its own, so that a
// batch-1 kernel carries one row's activation split (one batch size of loads: x_early's, after
// the wait too) instead of four (the 80B's fp8 grouped kernels were ~60% that code).
// kPacked (up to 2 rows): the mma's 8 columns are (token, term) pairs instead of tokens —
// column 4r + s is term s of token r (s = 3 a zero column) — so one mma per k16 does the work
// of three, and a lane loads one term of one token instead of three. A column's sums do not
// depend on the other columns, so the bits are those of the three chains; the fold h + (m + l)
// takes l from the next lane.
//
// kXEarly (grouped, shared x, one row; one split, or a CTA's splits): Params::x_early's kernel,
// which splits the activations before its wait and may run a known slice; the others split
// them after it only. Each carries one copy of the split (the down projection and the gate/up
// ran ~6 KB of the other's).
template <Elt E, bool kGrouped, bool kXShared, int kRows, int kRing = kRingPerWarp<E, kRows <= 2>,
          Fused kFused = Fused::none, bool kOneSplit = false, bool kXEarly = false,
          int kCtaSplits = 1>
__global__ void __launch_bounds__(cta_warps(kCtaSplits) * 32, 4 * kWarps / cta_warps(kCtaSplits))
    gemv_kernel(Params p, int x_rows) {
  static_assert(kRows == 1 || kRows == 2 || kRows == 8, "rows");
  static_assert(!kXEarly || (kGrouped && kXShared && kRows == 1 && (kOneSplit || kCtaSplits > 1)),
                "x_early");
  static_assert(kCtaSplits == 1 ||
                    (!kOneSplit && ((kCtaSplits >= 2 && kCtaSplits <= 4) || kCtaSplits == 8)),
                "splits in one CTA");
  constexpr int kCtaWarps = cta_warps(kCtaSplits), kRowGroups = kCtaWarps / kCtaSplits;
  constexpr int kCtaRows = 16 * kRowGroups;
  constexpr bool kPacked = kRows <= 2;
  constexpr bool kPaired = kFused == Fused::swiglu;
  using S = Gemv<E, kRing, kWideStages<E, kRing, kXShared>>;
  constexpr int VE = S::VE, KC = S::KC, U = S::U, D = S::D, MMAS = S::MMAS;
  constexpr int kStageK = S::kStageK;
  // launch() sizes shared memory from Gemv<E, kRing> (kSmem, and plane_pitch_bytes from KC):
  // the wide stages change neither.
  static_assert(S::kSmem == kWarps * kRing && S::KC == 64 / S::esize, "smem");
  constexpr int kRingBytes = kCtaWarps * kRing;           // every warp's ring
  constexpr int kTerms = kPacked ? 1 : 3;                 // terms (planes) a lane loads
  extern __shared__ __align__(128) unsigned char smem[];  // aligned: see the header
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  uint4* ring = reinterpret_cast<uint4*>(smem) + warp * D * S::kLaneCopies * 32 + lane;
  // The warp's split among the CTA's (kCtaSplits) and its 16 rows' group.
  const int warp_split = warp % kCtaSplits, row_group = warp / kCtaSplits;

  // Params::x_early (kXEarly): a grouped launch of one token's pairs splits that token's
  // activations before its wait and before it reads the routing (x row 0 whatever its group).
  assert(!kXEarly || p.x_early);
  assert(!(kGrouped && kXShared && p.x_early) || kRows == 1);  // (ignored otherwise)
  // Grouped launches learn their matrix from the routing, so they wait first where the previous
  // kernel wrote it; plain ones, and grouped ones whose routing is older (routing_ready), start
  // their weight copies before waiting. A known slice (Params::slice_known) reads nothing the
  // routing writes and x is old: it waits only before its stores.
  const bool known = kXEarly && p.slice_known && static_cast<int>(blockIdx.z) == p.known_slice;
  const bool early = !kGrouped || p.routing_ready || known;
  // The wait for the previous kernel, and then, by default, the next kernel's release.
  auto wait_previous = [&] {
    pdl_wait();
    if (p.release_early) pdl_trigger();
  };
  // The grid: 64 weight rows (x), the splits (y), the groups (z); a group's up to 8 token rows
  // are all the CTA's (the other kernels' token tiles: one here, so no division).
  const int my_split = blockIdx.y * kCtaSplits + warp_split;
  assert(gridDim.y * kCtaSplits == static_cast<unsigned>(p.splits));
  const int64_t k_first = static_cast<int64_t>(my_split) * p.split_len;
  const int64_t k_end = min(p.K, k_first + p.split_len);
  // Offsets below are k relative to the split's start, in 32 bits: the loop's address work is
  // one add per stream per stage, not a 64-bit product per load.
  const int span = static_cast<int>(k_end - k_first);
  // The CTA's k: its splits' (one, or kCtaSplits).
  const int64_t cta_k_first =
      kCtaSplits == 1 ? k_first : static_cast<int64_t>(blockIdx.y) * kCtaSplits * p.split_len;
  const int cta_span =
      kCtaSplits == 1
          ? span
          : static_cast<int>(min(p.K, cta_k_first + kCtaSplits * p.split_len) - cta_k_first);
  const int pitch = S::plane_pitch_bytes(kCtaSplits * p.split_len) / 4;  // words
  // kXShared: the CTA's activations of its splits, in shared memory past the rings
  // (share_activations, gemv_prologue.cuh).
  uint32_t* xw = reinterpret_cast<uint32_t*>(smem + kRingBytes);
  if constexpr (kXEarly) {
    share_activations<S, kCtaWarps, true>(p, xw, cta_k_first, cta_span, pitch, 1,
                                          [](int) -> int64_t { return 0; });
  }
  if (!early) wait_previous();
  MatPtr mat = p.single;
  int64_t rows_here = p.M;
  const int32_t* rows = nullptr;
  // A grouped CTA that leaves before its pdl_wait still waits: were every CTA to leave (no
  // pair routed here), the next kernel's wait would otherwise not cover the one before this.
  auto leave_early = [&] {
    if (kGrouped && early) pdl_wait();
  };
  if constexpr (kGrouped) {
    if (!slice_group(p, known, mat, rows, rows_here)) return leave_early();
  }
  if (rows_here <= 0) return leave_early();

  // The warp's 16 mma rows: rows g and g + 8 of its 16; paired (SwiGLU), 8 gate rows and their
  // up rows `pair` further (a CTA serves 32 outputs, and the grid is the same).
  const int64_t rA = kPaired ? static_cast<int64_t>(blockIdx.x) * (kCtaRows / 2) + row_group * 8 + g
                             : static_cast<int64_t>(blockIdx.x) * kCtaRows + row_group * 16 + g;
  const int64_t rB = kPaired ? rA + p.pair : rA + 8;
  const bool okA = rA < (kPaired ? p.pair : p.N), okB = kPaired ? okA : rB < p.N;
  const unsigned char* wbase = static_cast<const unsigned char*>(mat.w);
  const unsigned char* wA = wbase + ((okA ? rA : 0) * p.ldw + k_first + t * VE) * S::esize;
  const unsigned char* wB = wbase + ((okB ? rB : 0) * p.ldw + k_first + t * VE) * S::esize;
  const unsigned ring_s = static_cast<unsigned>(__cvta_generic_to_shared(ring));

  // Stage q covers k_first + q * kStageK; past the span a stage copies nothing (an empty group
  // keeps the wait counts uniform).
  int k_issue = 0;
  unsigned slot_issue = 0;
  auto issue = [&]() {
    if (k_issue < span) {
      const unsigned dst = ring_s + slot_issue * S::kStageBytes;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int kk = k_issue + u * KC + t * VE;
        const bool in = kk < span;
        const int64_t off = (in ? k_issue + u * KC : 0) * S::esize;
        cp_async16_stream_s(dst + 2 * u * 512, wA + off, in && okA);
        cp_async16_stream_s(dst + (2 * u + 1) * 512, wB + off, in && okB);
      }
    }
    cp_async_commit();
    k_issue += kStageK;
    slot_issue = slot_issue + 1 == D ? 0 : slot_issue + 1;
  };
  for (int q = 0; q < D - 1; ++q) issue();

  if (early && !known) wait_previous();  // the activations are the previous kernel's output
  // A known slice releases the next kernel without waiting (Params::slice_known): were it to
  // release only after its loop, the next kernel's launch would wait for that loop too.
  if (known && p.release_early) pdl_trigger();
  // The x row of token r of the tile, or -1.
  auto x_row_of = [&](int r) -> int64_t {
    if (r >= rows_here) return -1;
    return kGrouped ? rows[r] / p.x_div : r;
  };
  if constexpr (kXShared) {
    if constexpr (!kXEarly) {
      share_activations<S, kCtaWarps, kRows == 1>(p, xw, cta_k_first, cta_span, pitch, x_rows,
                                                  x_row_of);
    }
    __syncthreads();
  }
  // This lane's B column: token x_tok, all three terms (unpacked) or term x_term (packed).
  const int x_tok = kPacked ? g / 4 : g, x_term = kPacked ? g % 4 : 0;
  const bool column_used = !kPacked || x_term < 3;
  const int64_t xrow = kXShared || !column_used ? -1 : x_row_of(x_tok);
  // (x_rows bounds the rows of every group: run_gemv's max_rows contract.)
  assert(!kXShared || rows_here <= x_rows);
  assert(rows_here <= kRows && x_rows <= kRows);
  const bool has_x = column_used && x_tok < x_rows;
  const uint4* xs_lane = reinterpret_cast<const uint4*>(
      xw + (3 * x_tok + x_term) * pitch + t * (VE / 4) * 2 +
      (kCtaSplits == 1 ? 0 : warp_split * static_cast<int>(p.split_len) / 2));  // 2 words a 4 k
  const float* xp = p.x + (xrow >= 0 ? xrow * p.ldx : 0) + k_first + t * VE;
  auto load_x = [&](int k0, float(&v)[S::kXPerStage]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int kk = k0 + u * KC;
      const bool ok = xrow >= 0 && kk + t * VE < span;
      const float* src = xp + (ok ? kk : 0);
#pragma unroll
      for (int e = 0; e < VE; e += 4) {
        float4 f = make_float4(0.f, 0.f, 0.f, 0.f);
        if (ok) {
          if (p.vec_x) {
            f = __ldg(reinterpret_cast<const float4*>(src + e));
          } else {
            f = make_float4(__ldg(src + e), __ldg(src + e + 1), __ldg(src + e + 2),
                            __ldg(src + e + 3));
          }
        }
        v[u * VE + e] = f.x;
        v[u * VE + e + 1] = f.y;
        v[u * VE + e + 2] = f.z;
        v[u * VE + e + 3] = f.w;
      }
    }
  };

  // Block scales without a division in the loop: this lane's two rows of scales, the block
  // the current chunk is in and where it ends (splits and chunks are aligned to chunks, and
  // block_cols is a multiple of the chunk: mma_supports).
  const bool scaled = mat.scale != nullptr;
  int64_t sA = 0, sB = 0;
  int block_end = 0, block_len = 0;
  if (scaled) {  // (32-bit divisions: rows and k are below 2^31)
    const unsigned brows = static_cast<unsigned>(p.block_rows);
    const unsigned bcols = static_cast<unsigned>(p.block_cols);
    const unsigned kb = static_cast<unsigned>(k_first) / bcols;
    sA = static_cast<int64_t>(static_cast<unsigned>(rA) / brows) * p.scale_ld + kb;
    sB = static_cast<int64_t>(static_cast<unsigned>(rB) / brows) * p.scale_ld + kb;
    block_len = static_cast<int>(bcols);
    block_end = static_cast<int>((kb + 1) * bcols - k_first);
  }
  // The current block's scales, loaded a block ahead (a load at the fold stalled it: ncu).
  float scale_a = 0.0f, scale_b = 0.0f;
  auto load_scales = [&](int64_t a, int64_t b) {
    scale_a = okA ? scale_entry(p, mat.scale, a) : 0.0f;
    scale_b = okB ? scale_entry(p, mat.scale, b) : 0.0f;
  };
  if (scaled) load_scales(sA, sB);

  // Unpacked: three independent mma chains (the h, m and l terms of x); packed, one chain with
  // the terms in its columns. Folded as h + (m + l) where a scale block or the split ends.
  float acc[4], ch[4], cm[4], cl[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i] = ch[i] = cm[i] = cl[i] = 0.0f;
  auto fold = [&](float(&sum)[4]) {
    if constexpr (kPacked) {
      const float l0 = __shfl_down_sync(~0u, ch[0], 1), l2 = __shfl_down_sync(~0u, ch[2], 1);
      sum[0] = ch[0] + (ch[1] + l0);
      sum[2] = ch[2] + (ch[3] + l2);
      sum[1] = sum[3] = 0.0f;
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) sum[i] = ch[i] + (cm[i] + cl[i]);
    }
  };
  float xnext[S::kXPerStage];
  if constexpr (!kXShared) load_x(0, xnext);
  const uint4* ring_slot = ring;
  unsigned slot = 0;
  for (int k0 = 0; k0 < span; k0 += kStageK) {
    cp_async_wait<D - 2>();  // this stage's copies (the lane's own) have landed
    uint4 wa[U], wb[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      wa[u] = ring_slot[2 * u * 32];
      wb[u] = ring_slot[(2 * u + 1) * 32];
    }
    issue();  // refills the slot read in the previous stage, whose values are used
    float xv[S::kXPerStage];
    if constexpr (!kXShared) {
#pragma unroll
      for (int i = 0; i < S::kXPerStage; ++i) xv[i] = xnext[i];
      load_x(k0 + kStageK, xnext);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int ck = k0 + u * KC;
      if (ck >= span) break;  // the same for the whole warp
      // B fragments, per term: positions (2t, 2t+1) of product j take x elements 4j, 4j+1 of
      // the lane's group, (2t+8, 2t+9) elements 4j+2, 4j+3 — the weights' permutation.
      uint32_t bx[kTerms][2 * MMAS];
      if constexpr (kXShared) {
        const uint4* src = xs_lane + ck / 8;  // 2 words per 4 k
#pragma unroll
        for (int s = 0; s < kTerms; ++s) {
#pragma unroll
          for (int i = 0; i < MMAS / 2; ++i) {
            const uint4 v = has_x ? src[s * pitch / 4 + i] : make_uint4(0, 0, 0, 0);
            bx[s][4 * i] = v.x;
            bx[s][4 * i + 1] = v.y;
            bx[s][4 * i + 2] = v.z;
            bx[s][4 * i + 3] = v.w;
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < MMAS; ++j) {
          const float* x4 = xv + u * VE + 4 * j;
          const Split3 b01 = split3(x4[0], x4[1]), b23 = split3(x4[2], x4[3]);
#pragma unroll
          for (int s = 0; s < kTerms; ++s) {
            bx[s][2 * j] = b01.term(kPacked ? x_term : s);
            bx[s][2 * j + 1] = b23.term(kPacked ? x_term : s);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < MMAS; ++j) {
        uint32_t a[4];
        a_fragment<E>(wa[u], wb[u], j, a);
        mma(ch, a[0], a[1], a[2], a[3], bx[0][2 * j], bx[0][2 * j + 1]);
        if constexpr (!kPacked) {
          mma(cm, a[0], a[1], a[2], a[3], bx[1][2 * j], bx[1][2 * j + 1]);
          mma(cl, a[0], a[1], a[2], a[3], bx[2][2 * j], bx[2][2 * j + 1]);
        }
      }
      const int cend = ck + KC;
      if (scaled && (cend == block_end || cend >= span)) {
        const float sa = scale_a, sb = scale_b;
        block_end += block_len;
        if (block_end - block_len < span) load_scales(++sA, ++sB);  // the next block's
        float sum[4];
        fold(sum);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          acc[i] = fmaf(sum[i], i < 2 ? sa : sb, acc[i]);
          ch[i] = cm[i] = cl[i] = 0.0f;
        }
      }
    }
    slot = slot + 1 == D ? 0 : slot + 1;
    ring_slot = ring + slot * (S::kStageBytes / 16);
  }
  if (!p.release_early) pdl_trigger();  // every load of this CTA is done: the next may launch
  if (known) pdl_wait();                // (before its stores)

  float total[4];
  if (scaled) {
#pragma unroll
    for (int i = 0; i < 4; ++i) total[i] = acc[i];
  } else {
    fold(total);
  }
  if constexpr (kCtaSplits > 1) {
    // Each warp's sums into its own ring (its copies have all landed), then the row group's
    // first warp adds the others' in split order, as split_sums does.
    cp_async_wait<0>();
    float4* own = reinterpret_cast<float4*>(smem + warp * D * S::kStageBytes) + lane;
    *own = make_float4(total[0], total[1], total[2], total[3]);
    __syncthreads();
    if (warp_split != 0) return;
#pragma unroll
    for (int s = 1; s < kCtaSplits; ++s) {
      const float4 o = own[s * D * S::kStageBytes / 16];
      total[0] = total[0] + o.x;
      total[1] = total[1] + o.y;
      total[2] = total[2] + o.z;
      total[3] = total[3] + o.w;
    }
  }
  int32_t orow[4];
  out_rows<kGrouped, kPacked>(rows, rows_here, okA, okB, t, orow, known ? p.known_row : -1);
  finish<kGrouped, kFused, (kOneSplit || kCtaSplits > 1)>(p, total, orow, my_split, rA, rB);
}

}  // namespace hibana::cuda::mm
