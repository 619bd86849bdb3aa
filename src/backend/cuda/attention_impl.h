// Private to the CUDA attention files (attention.cu: KV storage, the per-token kernel, the
// merge and the dispatch; attention_tiled.cu: the register-tiled prefill kernel and its token
// blocks; attention_mma.cu and attention_decode.cu: the tensor-core kernels for whole prefill
// blocks and for the other rows). The per-token and tiled kernels compute a (token, head)'s
// share of one split with exactly the same arithmetic, so they are interchangeable bit for
// bit; attention_decode.cu writes the same partials in its own arithmetic (one bf16 term).
#pragma once

#include "backend/cuda/common.cuh"

namespace hibana::cuda::attn {

// Positions per split: kSplit, unless HIBANA_CUDA_ATTENTION_SPLIT asks for 64 or 32 (a
// benchmark knob, read at every launch: a shorter split gives a decode step more CTAs — the 80B's
// 2 KV heads leave 64 working CTAs at 4k positions — and changes the merge, hence the bits; the
// per-token and tiled kernels and the merge all take AttnParams::split).
constexpr int kSplit = 128;
constexpr int kTile = 32;           // keys per shared-memory tile
constexpr int kMaxDimsPerLane = 8;  // head_dim <= 256

// The row (in head_dim floats) of position `pos`'s key and value for KV head kvh, through its
// sequence's page table: in 32 bits (attention() checks that a layer's rows stay below 2^31;
// positions are int32), one division and one remainder.
__device__ __forceinline__ int kv_row(const int32_t* pages, int pos, int page, int kv_heads,
                                      int kvh) {
  return (pages[pos / page] * kv_heads + kvh) * page + pos % page;
}

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
  int split;  // positions per split: kSplit, 64 or 32
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

// attention_mma.cu: the rows of whole prefill blocks on tensor cores. mma_attention_terms: what
// HIBANA_CUDA_MMA_ATTENTION asks (0 off; 1, the default, one bf16 term of each operand; 3 two,
// three products each); mma_takes: whether a kernel takes this head_dim and group (2, 4 or 8)
// in this GPU's shared memory; mma_launch: rows [row0, row0 + rows) of p's launch (whole
// blocks of one or more sequences), their outputs final (times sigmoid(gate) with a gate).
int mma_attention_terms();
bool mma_takes(int64_t hd, int64_t group, int terms);
void mma_launch(const AttnParams& p, int64_t row0, int64_t rows, int terms, float* out,
                int64_t ldo, const float* gate, int64_t ldg);

// attention_decode.cu: the rows outside whole prefill blocks on tensor cores (one bf16 term),
// writing the split kernels' partials for the same merge. decode_mma_takes: whether it serves
// p's rows (HIBANA_CUDA_MMA_ATTENTION at 1 and HIBANA_CUDA_MMA_DECODE not off, a shape whose
// whole blocks mma_takes at one term, head_dim 64, 128 or 256, a group of up to 8, q rows
// 16-byte aligned, this GPU's shared memory);
// decode_mma_launch: p's t_count tokens from t_begin, a CTA per (token, KV head, split).
bool decode_mma_takes(const AttnParams& p);
void decode_mma_launch(const AttnParams& p);

}  // namespace hibana::cuda::attn
