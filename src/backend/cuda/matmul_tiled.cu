// Tensor-core matmul for large batches (prefill): a CTA computes a tile of 128 weight rows x 64
// tokens, streaming K through shared memory in stages of 64 (cp.async, three stages in flight —
// two where the GPU's shared memory per block is 99 KiB and bf16 weights need 120 for three),
// so every weight byte read from memory serves 64 tokens and every activation 128 rows.
//
// Same arithmetic as the small-batch kernel (matmul_mma.cu), bit for bit: the activations of a
// stage are split once into their three bf16 terms (x = h + m + l) in shared memory, and each
// output element is built from the same sequence of m16n8k16 products — the same k positions
// in the same fragment places, chunk by chunk with k ascending, three chains folded as
// h + (m + l) where a scale block or a split ends, splits added in order. So a token's outputs
// do not depend on which kernel ran or on the batch it came in.
//
// Shared memory is swizzled so that a quarter-warp's 16-byte weight loads and a half-warp's
// 8-byte activation loads each touch every bank once.
//
// Presplit (by default, see presplit()): a kernel splits the activations into three bf16 planes in
// global memory once per product, each stage's row stored in fragment order (16-byte unit s holds
// the bf16 pair that lane t passes as its register s of the stage's B fragments, for t = 0..3),
// and the tiled kernel copies those units straight into its stages and reads each product's two B
// registers with one ldmatrix.x2 per term — no split pass per stage and one barrier a stage
// instead of two. The same terms in the same fragment places, every accumulator's mmas in the same
// order: the same bits. Short rows (Params::prefill_mask) come rounded to the terms they carry
// (moe.cu): their other planes hold zeros, as the in-kernel split finds them.
//
// A warp skips the products of its n8 token tiles past the tile's rows (Params::tiled_skip):
// at ~10 rows an expert (a 512-token pass) half its warps have no row at all and the others
// two token tiles of four. Those outputs are never stored, so the bits stay.
#include <algorithm>
#include <memory>
#include <mutex>
#include <type_traits>

#include "backend/cuda/matmul_impl.h"
#include "backend/cuda/mma_common.cuh"
#include "backend/cuda/ops.h"
#include "core/log.h"

namespace hibana::cuda::mm {

namespace {

constexpr int kTileRows = 128;             // weight rows per CTA: 4 warps x 32
constexpr int kTileTokens = kTiledTokens;  // tokens per CTA: 2 warps x 32
constexpr int kThreads = 256;
constexpr int kStageK = 64;  // k per pipeline stage (a multiple of both chunk sizes' halves)
// The kernel's static shared memory: where its tile's x rows start, and its out rows.
constexpr int kStaticSmem = 2 * kTiledTokens * static_cast<int>(sizeof(int64_t));
constexpr int kMaxDepth = 3;  // pipeline slots (Params::tiled_depth: 3, or 2 where memory is short)
constexpr int kTermWords = kStageK / 2;  // u32 (bf16 pairs) per token and term in a stage

template <Elt E, bool kPre>
struct Tile {
  static constexpr int esize = EltInfo<E>::size;
  static constexpr int VE = 16 / esize;              // weight elements per 16 bytes
  static constexpr int KC = 4 * VE;                  // k per chunk: bf16 32, fp8 64
  static constexpr int kChunks = kStageK / KC;       // chunks per stage
  static constexpr int kMmas = VE / 4;               // k16 products per chunk
  static constexpr int kRowBytes = kStageK * esize;  // of a weight row per stage: 128 or 64
  static constexpr int kWBytes = kTileRows * kRowBytes;
  static constexpr int kTermBytes = kTileTokens * kStageK * 2;  // a term's bf16 of a stage
  // Raw f32 activations, or (kPre) the three terms' planes.
  static constexpr int kXBytes = kPre ? 3 * kTermBytes : kTileTokens * kStageK * 4;
  static constexpr int kStageBytes = kWBytes + kXBytes;
  static constexpr int kSplitBytes = kPre ? 0 : 3 * kTileTokens * kTermWords * 4;
  static constexpr int smem(int depth) { return depth * kStageBytes + kSplitBytes; }

  // Byte offset of 16-byte piece `piece` of weight row `row` within a stage: 128-byte rows put
  // odd rows' pieces in the other half of the banks (a quarter-warp reads rows g, g+1).
  __device__ static int w_offset(int row, int piece) {
    if constexpr (kRowBytes == 128) piece ^= (row & 1) << 2;
    return row * kRowBytes + 16 * piece;
  }
  // Word of token `tok`'s term row holding the bf16 pair at k = 2 * word of the stage.
  __device__ static int x_word(int tok, int word) {
    if constexpr (E == Elt::bf16) return word ^ ((tok & 1) << 4) ^ (tok & 2);
    return word ^ ((tok & 3) << 1);
  }
  // kPre: byte offset of 16-byte unit s (of 8) of token tok's row of a term's stage; units
  // swizzled by the token's low three bits, so ldmatrix's eight rows of one unit, and a
  // row's eight copies, hit every bank once.
  __device__ static int unit_offset(int tok, int s) {
    return tok * (kStageK * 2) + 16 * (s ^ (tok & 7));
  }
  // kPre: the stage's bf16 pair (k = 2 * word, 2 * word + 1) that word `at` of the stored row
  // holds: unit s = at / 4 is register (chunk c, product j, half h) = (s / (2 kMmas),
  // s % (2 kMmas) / 2, s % 2) of lane t = at % 4, whose pair is word
  // (c * KC + t * VE + 4 * j) / 2 + h (the in-kernel split's fragment places).
  __device__ static constexpr int stored_word(int at) {
    const int s = at / 4, t = at % 4;
    return s / (2 * kMmas) * (KC / 2) + t * (VE / 2) + s % (2 * kMmas);
  }
};

template <Elt E, bool kGrouped, bool kPre>
__global__ void __launch_bounds__(kThreads, 1) tiled_kernel(Params p) {
  pdl_start();
  using T = Tile<E, kPre>;
  // 128-byte aligned for its cp.async copies (gemv_kernel.cuh says why).
  extern __shared__ __align__(128) unsigned char smem[];
  const int depth = p.tiled_depth;
  uint32_t* split = reinterpret_cast<uint32_t*>(smem + depth * T::kStageBytes);  // [3][tok][w]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

  MatPtr mat = p.single;
  int64_t rows_here = p.M, m_tile = blockIdx.y;
  const int32_t* rows = nullptr;
  if constexpr (kGrouped) {  // blockIdx.y picks one tile of the list of every group's tiles
    const int n = *p.n_active, y = blockIdx.y;
    if (y >= p.tile_start[n]) return;
    int lo = 0, hi = n - 1;  // the last slice whose first tile is <= y
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (p.tile_start[mid] <= y)
        lo = mid;
      else
        hi = mid - 1;
    }
    const int grp = p.active[lo];
    m_tile = y - p.tile_start[lo];
    mat = p.mats[grp];
    rows = p.group_rows + p.group_offset[grp];
    rows_here = p.group_offset[grp + 1] - p.group_offset[grp];
    if (not_my_group(p, rows_here)) return;
  }
  const int64_t m0 = m_tile * kTileTokens;
  if (m0 >= rows_here) return;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTileRows;

  // Where each token's activations start (elements from p.x or, kPre, from a plane's start).
  __shared__ int64_t x_at[kTileTokens], o_row[kTileTokens];
  static_assert(sizeof(x_at) + sizeof(o_row) == kStaticSmem, "depth_for counts them");
  fill_rows<kGrouped>(p, rows, m0, rows_here, kTileTokens, kPre ? p.ld_split : p.ldx, x_at, o_row);
  __syncthreads();
  // Short rows (a pass's prefill tokens', Params::prefill_mask; rows past the group count as
  // such) come rounded to p.prefill_terms terms (moe.cu), so their other terms split to zeros:
  // a tile of them alone runs only those terms' products.
  bool all_short = false;
  if constexpr (kGrouped) {
    if (p.prefill_mask) {
      bool mine = true;
      if (threadIdx.x < kTileTokens) {
        const int64_t o = o_row[threadIdx.x];
        mine = o < 0 || p.prefill_mask[o / p.token_div] != 0;
      }
      all_short = __syncthreads_and(mine);
    }
  }

  const unsigned char* wbase = static_cast<const unsigned char*>(mat.w);
  const int64_t stages = (p.K + kStageK - 1) / kStageK;
  // A thread's weight pieces: piece `w_piece` of rows w_row0 + j * kWRowStep (j < kWCopies),
  // from w_first + j * w_step bytes (the row products made once, not a copy and stage).
  constexpr int kWPieces = T::kWBytes / 16, kPiecesPerRow = T::kRowBytes / 16;
  constexpr int kWCopies = kWPieces / kThreads, kWRowStep = kThreads / kPiecesPerRow;
  static_assert(kWPieces % kThreads == 0 && kThreads % kPiecesPerRow == 0, "weight pieces");
  const int w_row0 = threadIdx.x / kPiecesPerRow, w_piece = threadIdx.x % kPiecesPerRow;
  const int64_t w_step = int64_t{kWRowStep} * p.ldw * T::esize;
  const unsigned char* w_first = wbase + (n0 + w_row0) * p.ldw * T::esize + w_piece * 16;
  // Stage kt's weights and raw activations into slot `slot` (kt % depth); pieces past K or past
  // the tile's rows are zeros.
  auto load_stage = [&](int64_t kt, int slot) {
    unsigned char* base = smem + slot * T::kStageBytes;
    const int64_t k0 = kt * kStageK;
    const bool k_in = k0 + w_piece * T::VE < p.K;
#pragma unroll
    for (int j = 0; j < kWCopies; ++j) {
      const int row = w_row0 + j * kWRowStep;
      const bool ok = n0 + row < p.N && k_in;
      cp_async16(base + T::w_offset(row, w_piece),
                 ok ? w_first + j * w_step + k0 * T::esize : wbase, ok);
    }
    if constexpr (kPre) {  // the terms' 16-byte units; rows are whole stages (zeros past K)
      // A thread copies unit u of tokens tok0 and tok0 + 32 in each term's plane.
      static_assert(kThreads == 8 * kTileTokens / 2, "a unit of two tokens a thread");
      const int u = threadIdx.x % 8, tok0 = threadIdx.x / 8;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int tok = tok0 + 32 * half;
        const int64_t r = x_at[tok];
        const uint16_t* src = p.xsplit + (r >= 0 ? r + k0 + 8 * u : 0);
        unsigned char* dst = base + T::kWBytes + T::unit_offset(tok, u);
#pragma unroll
        for (int term = 0; term < 3; ++term)
          cp_async16(dst + term * T::kTermBytes, src + term * p.split_plane, r >= 0);
      }
    } else {
      float* xs = reinterpret_cast<float*>(base + T::kWBytes);
      for (int i = threadIdx.x; i < kTileTokens * kStageK / 4; i += kThreads) {
        const int tok = i / (kStageK / 4), q = i % (kStageK / 4);
        const int64_t r = x_at[tok], k = k0 + 4 * q;
        const bool ok = r >= 0 && k < p.K;
        cp_async16(xs + tok * kStageK + 4 * q, p.x + (ok ? r + k : 0), ok);
      }
    }
  };
  // The raw activations of slot `slot` as three bf16 terms, in fragment-friendly words (a tile
  // of short rows alone: only the terms they carry).
  const int short_terms = kGrouped && p.prefill_mask != nullptr ? p.prefill_terms : 3;
  auto split_stage = [&](int slot) {
    const float* xs = reinterpret_cast<const float*>(smem + slot * T::kStageBytes + T::kWBytes);
    for (int i = threadIdx.x; i < kTileTokens * kStageK / 4; i += kThreads) {
      const int tok = i / (kStageK / 4), q = i % (kStageK / 4);
      const float4 v = *reinterpret_cast<const float4*>(xs + tok * kStageK + 4 * q);
      const Split3 a = split3(v.x, v.y), b = split3(v.z, v.w);
      const int w = tok * kTermWords + T::x_word(tok, 2 * q);
      constexpr int kTerm = kTileTokens * kTermWords;
      *reinterpret_cast<uint2*>(split + w) = make_uint2(a.h, b.h);
      if (all_short && short_terms == 1) continue;
      *reinterpret_cast<uint2*>(split + kTerm + w) = make_uint2(a.m, b.m);
      if (all_short) continue;
      *reinterpret_cast<uint2*>(split + 2 * kTerm + w) = make_uint2(a.l, b.l);
    }
  };

  // Warp (wr, wc): rows wr*32 + [0, 32) as two m16 tiles, tokens wc*32 + [0, 32) as four n8.
  // Its n8 tiles from `live` on hold none of the tile's rows (Params::tiled_skip: their
  // products are skipped; those outputs are never stored, the others' products are the same).
  const int wr = (warp % 4) * 32, wc = (warp / 4) * 32;
  const int rows_in_tile = static_cast<int>(min(int64_t{kTileTokens}, rows_here - m0));
  const int live = p.tiled_skip ? max(0, min(4, (rows_in_tile - wc + 7) / 8)) : 4;
  float total[2][4][4], ch[2][4][4], cm[2][4][4], cl[2][4][4], acc[2][4][4];
  auto clear = [](float(&c)[2][4][4]) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) c[mt][nt][i] = 0.0f;
  };
  clear(ch), clear(cm), clear(cl), clear(acc), clear(total);
  const bool scaled = mat.scale != nullptr;
  // A split ends: its sum joins the total (splits added in order, the first one as is).
  auto end_split = [&](bool first) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float v = scaled ? acc[mt][nt][i] : ch[mt][nt][i] + (cm[mt][nt][i] + cl[mt][nt][i]);
          total[mt][nt][i] = first ? v : total[mt][nt][i] + v;
          ch[mt][nt][i] = cm[mt][nt][i] = cl[mt][nt][i] = acc[mt][nt][i] = 0.0f;
        }
  };

  // Scaled formats: the block scales of the lane's four rows (rows g and g + 8 of each m tile).
  BlockScales<4> scales;
  if (scaled) {
    const int64_t r0 = n0 + wr + g;
    const int64_t scale_rows[4] = {r0, r0 + 8, r0 + 16, r0 + 24};
    scales.start(p, mat.scale, scale_rows, p.N, 0);
  }

  // kTerms: the terms the tile's rows carry (3, or 1 or 2 where they are all short rows: the
  // other terms' products skipped). k_end: the end of the split holding k0.
  auto compute = [&](auto terms, int slot, int64_t k0, int64_t k_end) {
    constexpr int kTerms = decltype(terms)::value;
    if (live == 0) return;  // (the warp's outputs are none of the tile's rows)
    const unsigned char* ws = smem + slot * T::kStageBytes;
#pragma unroll
    for (int c = 0; c < T::kChunks; ++c) {
      const int64_t ck = k0 + c * T::KC;
      if (ck >= p.K) break;  // the same for the whole CTA
      uint4 ra[2], rb[2];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const int row = wr + mt * 16 + g;
        ra[mt] = *reinterpret_cast<const uint4*>(ws + T::w_offset(row, c * 4 + t));
        rb[mt] = *reinterpret_cast<const uint4*>(ws + T::w_offset(row + 8, c * 4 + t));
      }
      if constexpr (kPre) {
        const unsigned xs = static_cast<unsigned>(__cvta_generic_to_shared(ws + T::kWBytes));
#pragma unroll
        for (int j = 0; j < T::kMmas; ++j) {
          uint32_t a[2][4];
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) a_fragment<E>(ra[mt], rb[mt], j, a[mt]);
          // Lanes 0-7 address unit (c, j, h = 0) of the n tile's 8 tokens, lanes 8-15 h = 1
          // (the others' addresses are not read).
          const int s = (c * T::kMmas + j) * 2 + (lane / 8) % 2;
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) {
            if (nt >= live) break;  // (the same for the whole warp)
            const unsigned at = xs + T::unit_offset(wc + nt * 8 + lane % 8, s);
            uint32_t h[2], m[2], l[2];
            ldmatrix_x2(at, h);
            if constexpr (kTerms >= 2) ldmatrix_x2(at + T::kTermBytes, m);
            if constexpr (kTerms == 3) ldmatrix_x2(at + 2 * T::kTermBytes, l);
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
              mma(ch[mt][nt], a[mt][0], a[mt][1], a[mt][2], a[mt][3], h[0], h[1]);
              if constexpr (kTerms >= 2)
                mma(cm[mt][nt], a[mt][0], a[mt][1], a[mt][2], a[mt][3], m[0], m[1]);
              if constexpr (kTerms == 3)
                mma(cl[mt][nt], a[mt][0], a[mt][1], a[mt][2], a[mt][3], l[0], l[1]);
            }
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < T::kMmas; ++j) {
          uint32_t a[2][4];
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) a_fragment<E>(ra[mt], rb[mt], j, a[mt]);
          const int word = (c * T::KC + t * T::VE + 4 * j) / 2;
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) {
            if (nt >= live) break;  // (the same for the whole warp)
            const int tok = wc + nt * 8 + g;
            const int w = tok * kTermWords + T::x_word(tok, word);
            constexpr int kTerm = kTileTokens * kTermWords;
            const uint2 h = *reinterpret_cast<const uint2*>(split + w);
            uint2 m = {}, l = {};
            if constexpr (kTerms >= 2) m = *reinterpret_cast<const uint2*>(split + kTerm + w);
            if constexpr (kTerms == 3) l = *reinterpret_cast<const uint2*>(split + 2 * kTerm + w);
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
              mma(ch[mt][nt], a[mt][0], a[mt][1], a[mt][2], a[mt][3], h.x, h.y);
              if constexpr (kTerms >= 2)
                mma(cm[mt][nt], a[mt][0], a[mt][1], a[mt][2], a[mt][3], m.x, m.y);
              if constexpr (kTerms == 3)
                mma(cl[mt][nt], a[mt][0], a[mt][1], a[mt][2], a[mt][3], l.x, l.y);
            }
          }
        }
      }
      // Scaled formats: each scale block's sum is scaled and added as the block ends.
      const int64_t cend = ck + T::KC;
      if (scaled && (cend == scales.end || cend >= k_end)) {
        float s[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) s[r] = scales.s[r];
        if (cend == scales.end) scales.next(p, mat.scale);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          const float sa = s[2 * mt], sb = s[2 * mt + 1];
#pragma unroll
          for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              acc[mt][nt][i] = fmaf(ch[mt][nt][i] + (cm[mt][nt][i] + cl[mt][nt][i]),
                                    i < 2 ? sa : sb, acc[mt][nt][i]);
              ch[mt][nt][i] = cm[mt][nt][i] = cl[mt][nt][i] = 0.0f;
            }
        }
      }
    }
  };

  for (int s = 0; s < depth - 1; ++s) {
    if (s < stages) load_stage(s, s);
    cp_async_commit();
  }
  // Stage kt is in slot kt % depth; stage kt + depth - 1 goes to the slot stage kt - 1 left
  // (the one before, cyclically).
  int slot = 0;
  // The end of the split holding the stage (splits are whole stages: multiples of
  // kSplitQuantum), advanced as the stages pass it instead of a division a stage.
  int64_t split_end = min(p.K, p.split_len);
  for (int64_t kt = 0; kt < stages; ++kt) {
    if (depth == kMaxDepth) {
      cp_async_wait<kMaxDepth - 2>();
    } else {
      cp_async_wait<0>();
    }
    // Stage kt has landed; every warp is done with the previous stage's slot (the one loaded
    // next) and split terms.
    __syncthreads();
    if constexpr (!kPre) split_stage(slot);
    if (kt + depth - 1 < stages) load_stage(kt + depth - 1, slot == 0 ? depth - 1 : slot - 1);
    cp_async_commit();
    if constexpr (!kPre) __syncthreads();  // the split terms are visible
    const int64_t k0 = kt * kStageK;
    if (k0 == split_end) {
      end_split(k0 == p.split_len);
      split_end = min(p.K, k0 + p.split_len);
    }
    using Three = std::integral_constant<int, 3>;
    if constexpr (kGrouped) {
      if (!all_short) {
        compute(Three{}, slot, k0, split_end);
      } else if (short_terms == 1) {
        compute(std::integral_constant<int, 1>{}, slot, k0, split_end);
      } else {
        compute(std::integral_constant<int, 2>{}, slot, k0, split_end);
      }
    } else {
      compute(Three{}, slot, k0, split_end);
    }
    slot = slot + 1 == depth ? 0 : slot + 1;
  }
  end_split(p.K <= p.split_len);

  // Lane outputs: c[0], c[1] are row g of the m tile for tokens 2t, 2t+1 of the n tile; c[2],
  // c[3] row g + 8.
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t n = n0 + wr + mt * 16 + g + (i < 2 ? 0 : 8);
        const int64_t orow = o_row[wc + nt * 8 + 2 * t + (i & 1)];
        if (orow >= 0 && n < p.N) p.out[orow * p.ldo + n] = total[mt][nt][i];
      }
}

// x's rows as the three bf16 planes the pre-split kernel reads (Params::xsplit): a thread per
// 16-byte unit of a stored row (four bf16 pairs, Tile::stored_word's), split3's terms, zeros
// from K to the row's end ld (a multiple of the stage).
template <Elt E>
__global__ void presplit_kernel(const float* x, int64_t ldx, int64_t rows, int64_t K, int64_t ld,
                                uint16_t* planes) {
  pdl_start();
  using T = Tile<E, true>;
  const int64_t per_row = ld / 8, plane = rows * per_row;  // units
  uint4* out = reinterpret_cast<uint4*>(planes);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < plane;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, unit = i % per_row;
    const int64_t stage_k = unit / (kStageK / 8) * kStageK;
    const int at0 = static_cast<int>(unit % (kStageK / 8)) * 4;
    uint32_t h[4], m[4], l[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const int64_t k = stage_k + 2 * T::stored_word(at0 + w);
      const float* src = x + r * ldx + k;  // k is even, rows 16-byte aligned
      float2 v = make_float2(0.0f, 0.0f);
      if (k + 1 < K) {
        v = *reinterpret_cast<const float2*>(src);
      } else if (k < K) {
        v.x = src[0];
      }
      const Split3 t = split3(v.x, v.y);
      h[w] = t.h, m[w] = t.m, l[w] = t.l;
    }
    out[i] = make_uint4(h[0], h[1], h[2], h[3]);
    out[plane + i] = make_uint4(m[0], m[1], m[2], m[3]);
    out[2 * plane + i] = make_uint4(l[0], l[1], l[2], l[3]);
  }
}

// The pipeline depth a tile of this format can have on this GPU (smem_per_block, which the
// kernel's static row lists share): 3, 2, or 0 (it does not fit).
template <Elt E, bool kPre>
int depth_for() {
  using T = Tile<E, kPre>;
  const int limit = smem_per_block() - kStaticSmem;
  return T::smem(kMaxDepth) <= limit ? kMaxDepth : T::smem(2) <= limit ? 2 : 0;
}

template <Elt E, bool kGrouped, bool kPre>
void launch(Params p, int64_t max_rows, int groups) {
  using T = Tile<E, kPre>;
  p.tiled_depth = depth_for<E, kPre>();
  // HIBANA_CUDA_TILED_SKIP: the empty n8 tiles' products skipped, the default (the 80B's 8k
  // prefill 1.12 times as fast in 512-token passes, 1.04 in 4096: H100, docs/benchmarks.md,
  // thirty-ninth slice); =0 runs them. Read at every launch.
  p.tiled_skip = knob_on("HIBANA_CUDA_TILED_SKIP", true);
  check(p.tiled_depth > 0, ErrorKind::internal, "tiled matmul: not enough shared memory");
  const int smem = T::smem(p.tiled_depth);
  // The kernel may take what this launch needs (never more than the GPU's limit: depth_for).
  {
    static std::mutex m;
    static int allowed = 0;  // per instantiation
    std::lock_guard<std::mutex> lock(m);
    if (smem > allowed) {
      HIBANA_CUDA(cudaFuncSetAttribute(tiled_kernel<E, kGrouped, kPre>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      allowed = smem;
    }
  }
  // Grouped: every group's tiles in one list, at most one partial tile per group.
  const int64_t tiles = kGrouped ? (p.M + kTileTokens - 1) / kTileTokens + groups
                                 : (max_rows + kTileTokens - 1) / kTileTokens;
  dim3 grid(static_cast<unsigned>((p.N + kTileRows - 1) / kTileRows), static_cast<unsigned>(tiles));
  launch_pdl(tiled_kernel<E, kGrouped, kPre>, grid, kThreads, smem, p);
  launched("tiled_kernel");
}

template <Elt E, bool kPre>
void launch_elt(const Params& p, bool grouped, int64_t max_rows, int groups) {
  grouped ? launch<E, true, kPre>(p, max_rows, groups)
          : launch<E, false, kPre>(p, max_rows, groups);
}

template <bool kPre>
void launch_pre(const Params& p, Elt elt, bool grouped, int64_t max_rows, int groups) {
  elt == Elt::bf16 ? launch_elt<Elt::bf16, kPre>(p, grouped, max_rows, groups)
                   : launch_elt<Elt::fp8, kPre>(p, grouped, max_rows, groups);
}

// Which products split their activations beforehand (HIBANA_CUDA_TILED_PRESPLIT, on by default;
// =0 turns it off, for every product). The plain ones since the sixteenth slice (on an H100 the
// 8B's 8k-token prefill went 2358.6 -> 2591.3 tokens/s); the grouped experts lost with it then
// (2338 -> 2639 ms on the 80B), and once the loop lost its divisions (docs/benchmarks.md,
// thirty-seventh slice) won: the 80B's experts in 4096-token passes 2169 -> 1674 ms of op time,
// its 8k prefill 1.15 times as fast. Short rows (Params::prefill_mask) take them too.
bool presplit() { return knob_on("HIBANA_CUDA_TILED_PRESPLIT", true); }
// Set (and on): the planes whatever memory is left. Unset: until memory has run short (below).
bool presplit_asked() {
  const char* v = std::getenv("HIBANA_CUDA_TILED_PRESPLIT");
  return v && *v && presplit();
}

// Once the GPU has refused an allocation until the pool gave its idle memory back
// (pool_trims), the planes are no longer asked for: the pool would keep them, the next large
// buffer would be refused again, and each such trim waits for the stream (the 80B's one
// 8k-token pass on an 80 GB H100: 4603.6 tokens/s with the planes, 7769.2 without).
bool planes_wanted() {
  if (pool_trims() == 0 || presplit_asked()) return true;
  static std::once_flag told;
  std::call_once(told, [] {
    log_warn("GPU memory ran short: prefill products split their activations in the kernel from "
             "now on (HIBANA_CUDA_TILED_PRESPLIT=1 keeps the pre-split planes)");
  });
  return false;
}

int depth_of(Elt elt, bool pre) {
  if (elt == Elt::bf16) return pre ? depth_for<Elt::bf16, true>() : depth_for<Elt::bf16, false>();
  return pre ? depth_for<Elt::fp8, true>() : depth_for<Elt::fp8, false>();
}

}  // namespace

bool tiled_supports(const Params& p, Elt elt, bool grouped) {
  return p.vec_x && (!grouped || p.tile_start != nullptr) && depth_of(elt, presplit()) > 0;
}

void run_tiled(const Params& in, Elt elt, bool grouped, int64_t max_rows, int groups) {
  if (!presplit() || !planes_wanted()) {
    return launch_pre<false>(in, elt, grouped, max_rows, groups);
  }
  // The rows of x: every row a plain product has, or those a grouped one's row list reaches.
  Params p = in;
  const int64_t rows = grouped ? (p.M + p.x_div - 1) / p.x_div : p.M;
  p.ld_split = (p.K + kStageK - 1) / kStageK * kStageK;
  p.split_plane = rows * p.ld_split;
  // (Pooled: a cudaFree per product would wait for the device. The pool keeps the largest
  // planes, 6 bytes an activation, for reuse.) Where the GPU has no room for them even once the
  // pool has given its idle memory back (device_allocate), the in-kernel split, the same bits.
  const size_t bytes = static_cast<size_t>(3 * p.split_plane) * sizeof(uint16_t);
  std::unique_ptr<Scratch> planes;
  try {
    planes = std::make_unique<Scratch>(bytes, true);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::out_of_memory) throw;
    return launch_pre<false>(in, elt, grouped, max_rows, groups);
  }
  p.xsplit = planes->as<uint16_t>();
  const int64_t units = p.split_plane / 8;
  const dim3 blocks(static_cast<unsigned>(std::min<int64_t>((units + 255) / 256, 4096)));
  auto kernel = elt == Elt::bf16 ? presplit_kernel<Elt::bf16> : presplit_kernel<Elt::fp8>;
  launch_pdl(kernel, blocks, 256, 0, p.x, p.ldx, rows, p.K, p.ld_split, planes->as<uint16_t>());
  launched("presplit_kernel");
  launch_pre<true>(p, elt, grouped, max_rows, groups);
}

}  // namespace hibana::cuda::mm
