// Private to the CUDA attention files (attention.cu: KV storage, the per-token kernel, the
// merge and the dispatch; attention_tiled.cu: the register-tiled prefill kernel and its token
// blocks). Both compute a
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
  int group;  // query heads per KV head
  // Tiled kernel: CTA x serves up to `block_tokens` consecutive tokens of one sequence;
  // sequence s's blocks start at block_start[s] (num_seqs + 1 entries, set by tiled_launch).
  const int32_t* block_start;
  const int32_t* seq_start;
  int num_seqs, block_tokens;
  float* partial;  // [tokens of launch][heads][max_splits][hd + 2]: acc..., max, sum
};

// The register-tiled kernel (attention_tiled.cu) for this head_dim and GQA group: the tokens
// per CTA, or 0 when it has no variant for them. tiled_launch lays out the launch's token
// blocks per sequence in `block_start` ([num_seqs + 1] on the GPU) and runs it.
int tiled_block_tokens(int64_t hd, int64_t group);
void tiled_launch(AttnParams p, int32_t* block_start);

}  // namespace hibana::cuda::attn
