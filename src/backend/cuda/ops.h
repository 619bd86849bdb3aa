// The CUDA implementations of the Backend ops, one .cu file per family. Each takes device
// tensors laid out as backend.h describes and queues its kernels on stream(); none waits.
#pragma once

#include "backend/backend.h"

namespace hibana::cuda {

int num_sms();
// The shared memory a CTA may ask for: the GPU's opt-in limit (227 KiB on sm_90, 99 KiB on
// sm_86/89/120/121 such as DGX Spark's GB10), or HIBANA_CUDA_SMEM_LIMIT bytes if that is less —
// so a GPU with more runs, and tests check, the paths of one with less (values near a real GPU's:
// far lower ones leave some kernels nothing that fits, e.g. head_dim 256 attention below 66 KB).
// Kernels that would need more take fewer pipeline stages or another kernel. Read at every call.
int smem_per_block();
// The GPU's opt-in limit alone: what a kernel's shared-memory attribute, set once, may allow.
int smem_optin();

// elementwise.cu
void embedding(const Weight& table, const Tensor& ids, Tensor out);
void rmsnorm(const Tensor& x, const Tensor& w, float eps, bool zero_centred, Tensor out);
void gated_rmsnorm(const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor out);
void add_rmsnorm(Tensor x, const Tensor& y, const Tensor& w, float eps, bool zero_centred,
                 Tensor out);
// Whether add_rmsnorm takes its one wide kernel (whole rows of at least 1024 values, out not
// x), whose arithmetic norm_impl.cuh holds; otherwise it is the add and the norm kernels.
bool add_rmsnorm_is_wide(const Tensor& x, const Tensor& w, const Tensor& out);
void gather_columns(const Tensor& x, const Tensor& index, Tensor out);
void rope(Tensor x, int64_t heads, int64_t head_dim, int64_t rot_dim, double theta,
          const BatchLayout& layout);
void add(Tensor x, const Tensor& y);
void mul_sigmoid(Tensor x, const Tensor& g);
void add_sigmoid_scaled(Tensor x, const Tensor& y, const Tensor& g);
void silu_mul(const Tensor& gate, const Tensor& up, Tensor out);

// moe_route.cu
void moe_route(const Tensor& logits, int64_t k, bool renormalise, const Tensor& shared_gate,
               Tensor ids, Tensor weights);

// matmul.cu
void matmul(const Tensor& x, const Weight& w, Tensor out);
// matmul_cublas.cu: out = x · wᵀ by cuBLASLt on bf16 terms (the prefill rows of a pass,
// Backend::set_prefill_rows), one algorithm per weight shape and output pitch whatever the
// rows, so a row's bits do not depend on how many the product has. cublas_takes: whether it
// takes this product (bf16 or fp8 weights, f32 activations and outputs with 16-byte rows, an
// algorithm found; not with HIBANA_CUDA_CUBLAS_PREFILL=0; =1 the activations as one bf16 term,
// =2, the default, as two, =3 their three terms); the output must be 16-byte aligned.
// matmul_cublas returns false, computing nothing, where the shape's algorithm does not take
// x's row count (cublasLtMatmulAlgoCheck): those rows are the caller's.
bool cublas_takes(const Tensor& x, const Weight& w, const Tensor& out);
bool matmul_cublas(const Tensor& x, const Weight& w, Tensor out);
// out = silu(x · gateᵀ) * (x · upᵀ) for w = [gate ; up], in one decode-kernel launch with the
// bits of matmul then silu_mul, where matmul_swiglu_fits (at most 8 rows, weights with 16-byte
// rows); the caller checks first, so an op report names only what ran.
bool matmul_swiglu_fits(const Tensor& x, const Weight& w, const Tensor& out);
void matmul_swiglu(const Tensor& x, const Weight& w, Tensor out);
// out = x · wᵀ and conv_out = gdn_conv of out's first conv_w.shape[0] columns, in one
// decode-kernel launch with the bits of the two ops, where matmul_conv_fits: one token a sequence
// (at most 8), a weight the tensor-core kernels take, a kernel of at most 5 taps.
bool matmul_conv_fits(const Tensor& x, const Weight& w, const Tensor& conv_w,
                      const BatchLayout& layout);
void matmul_conv(const Tensor& x, const Weight& w, const Tensor& conv_w, Tensor conv_states,
                 const BatchLayout& layout, Tensor out, Tensor conv_out);
void moe_keep_experts(Tensor ids, Tensor weights, int64_t first, int64_t count);
// fuse_swiglu: where every expert's group fits the decode kernel and gate and up are stacked,
// that launch also computes silu(gate) * up (matmul_swiglu's way). prefetch_down: the down
// projection's decode kernel streams weights before waiting for the previous kernel (its
// routing is older than that kernel).
// The MoE experts' rows of a pass's prefill tokens with fewer terms of the activations
// (HIBANA_CUDA_GROUPED_PREFILL): mask[t] != 0 for those tokens (mark_prefill_tokens), whose rows
// carry the first `terms` (1 or 2) bf16 terms (mm::Params::prefill_mask; moe.cu rounds their
// activations to them); a null mask: none.
struct PrefillTerms {
  const uint8_t* mask = nullptr;
  int terms = 3;
};
void moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                 const ExpertWeights& experts, Tensor out, bool fuse_swiglu = false,
                 bool prefetch_down = false, PrefillTerms prefill = {});
// moe_route then moe_experts, then with `then` its add_rmsnorm (Backend::moe_route_experts),
// in fewer launches, with the same bits: f.route, the routing and the grouping of its pairs by
// expert in one launch (where route_group_fits); with `then` (where add_rmsnorm is one wide
// kernel: add_rmsnorm_is_wide), the combine, the add and the norm in one kernel.
// The combine keeps its CTAs (kWideThreads columns each) and each token's last CTA to finish
// applies the norm. It takes the norm for at most kCombineNormTokens tokens: decode batches, the
// only ones it was measured on (a prefill's norm stays add_rmsnorm's own kernel).
constexpr int64_t kCombineNormTokens = 64;
// x_early: at one token, the gate/up launches read x before their wait (mm::Params::x_early;
// x must be older than the routing's launches, as the router's input is). shared_early: at
// one token with a shared gate (the shared expert folded in as the set's last), the gate/up
// slice of the shared expert runs before the routing is known (mm::Params::slice_known).
// prefill: the pass's prefill tokens whose rows carry fewer terms (PrefillTerms).
struct MoeFusions {
  bool route, swiglu, prefetch_down, x_early, shared_early;
  PrefillTerms prefill;
};
// mask[t] = 1 for the tokens of `rows` (Backend::set_prefill_rows), 0 for the others of
// `tokens`, on the stream.
void mark_prefill_tokens(const std::vector<Backend::RowRange>& rows, int64_t tokens,
                         uint8_t* mask);
void moe_route_experts(const Tensor& x, const Tensor& logits, int64_t k, bool renormalise,
                       const Tensor& shared_gate, const ExpertWeights& experts, Tensor ids,
                       Tensor weights, Tensor out, const Backend::ResidualNorm* then,
                       const MoeFusions& f);
// Whether route_and_group takes this routing: up to 32 tokens, and an expert set that is the
// routing's experts (plus the shared one when there is a shared gate).
bool route_group_fits(int64_t tokens, const Tensor& logits, const Tensor& shared_gate,
                      const ExpertWeights& experts);

// sampling.cu
void penalise_rows(const Tensor& logits, const LogitsPenalties& penalties, Tensor out);
void logits_summary(const Tensor& logits, const std::vector<float>& temperature, int64_t k,
                    Tensor out);

// attention.cu
void store_kv(const Tensor& k, const Tensor& v, Tensor k_pages, Tensor v_pages,
              const BatchLayout& layout);
// With a gate: out *= sigmoid(gate) in the merge kernel (mul_sigmoid's bits). With the pass's
// prefill rows (Backend::set_prefill_rows) and HIBANA_CUDA_MMA_ATTENTION on, those rows on
// tensor cores (attention_mma.cu), the others by the split kernels.
void attention(const Tensor& q, int64_t heads, const Tensor& k_pages, const Tensor& v_pages,
               float scale, const BatchLayout& layout, Tensor out, const Tensor* gate = nullptr,
               const std::vector<Backend::RowRange>* prefill_rows = nullptr);

// attention_prep.cu: the fused norms, rope and store_kv where the shapes allow it.
bool attention_prep_fits(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_norm,
                         const Tensor& k_norm, const Backend::AttentionPrep& a,
                         const Tensor& k_pages);
void attention_prep(Tensor q, Tensor k, const Tensor& v, const Tensor& q_norm, const Tensor& k_norm,
                    const Backend::AttentionPrep& a, Tensor k_pages, Tensor v_pages,
                    const BatchLayout& layout);

// gdn.cu
void gdn_conv(const Tensor& x, const Tensor& w, Tensor conv_states, const BatchLayout& layout,
              Tensor out);
void gdn_recurrence(const Tensor& qkv, const Tensor& b, const Tensor& a, const Tensor& A_log,
                    const Tensor& dt_bias, const Backend::GdnShape& shape, Tensor states,
                    const BatchLayout& layout, Tensor out);

}  // namespace hibana::cuda
