// Private to the CUDA attention files (attention.cu: KV storage, the per-token kernel, the
// merge and the dispatch; attention_tiled.cu: the register-tiled prefill kernel). Both compute a
// (token, head)'s share of one split with exactly the same arithmetic, so they are
// interchangeable bit for bit.
#pragma once

#include "backend/cuda/common.cuh"

namespace hibana::cuda::attn {

constexpr int kSplit = 128;         // positions per split
constexpr int kTile = 32;           // keys per shared-memory tile
constexpr int kMaxDimsPerLane = 8;  // head_dim <= 256

struct AttnParams {
  const float* q;
  int64_t ldq;
  const float* kp;
  const float* vp;
  const int32_t* pos;
  const int32_t* token_seq;
  const int32_t* table;
  int64_t max_pages, page, kv_heads, heads, hd;
  float scale;
  int64_t t_begin;  // first token of this launch
  int64_t t_count;  // tokens of this launch
  int max_splits;
  int stages;  // K/V tiles in flight: 2, or 1 where shared memory is short
  int group;   // query heads per KV head
  // Token blocks (prefill): CTA x serves up to `block_tokens` consecutive tokens of one
  // sequence; sequence s's blocks start at block_start[s] (num_seqs + 1 entries). Null: CTA x
  // serves token t_begin + x alone.
  const int32_t* block_start;
  const int32_t* seq_start;
  int num_seqs, block_tokens;
  float* partial;  // [tokens of launch][heads][max_splits][hd + 2]: acc..., max, sum
};

// The tokens of this CTA: token t_begin + blockIdx.x alone, or a block of consecutive tokens of
// one sequence (binary search of the per-sequence block list). False when the CTA has none.
__device__ __forceinline__ bool cta_tokens(const AttnParams& p, int64_t& tb, int64_t& tn) {
  tb = p.t_begin + blockIdx.x;
  tn = 1;
  if (p.block_start == nullptr) return true;
  const int b = blockIdx.x;
  if (b >= p.block_start[p.num_seqs]) return false;
  int lo = 0, hi = p.num_seqs - 1;  // the last sequence whose first block is <= b
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.block_start[mid] <= b) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int64_t first = max(static_cast<int64_t>(p.seq_start[lo]), p.t_begin);
  const int64_t last = min(static_cast<int64_t>(p.seq_start[lo + 1]), p.t_begin + p.t_count);
  tb = first + static_cast<int64_t>(b - p.block_start[lo]) * p.block_tokens;
  tn = min(static_cast<int64_t>(p.block_tokens), last - tb);
  return tn > 0;
}

// The register-tiled kernel (attention_tiled.cu) for this head_dim and GQA group: the tokens
// per CTA, or 0 when it has no variant for them. tiled_launch runs it (p.block_start set).
int tiled_block_tokens(int64_t hd, int64_t group);
void tiled_launch(const AttnParams& p, int64_t ctas);

}  // namespace hibana::cuda::attn
