// The op set every model is written against. The CPU backend is the readable reference;
// others must give the same results within the tolerances the parity tests set.
//
// Conventions: activations are f32, row-major, [rows, cols] with a row stride (Tensor::stride[0])
// so column ranges of a wider buffer can be passed as views. Weights are Weight (any float
// storage dtype, optionally block-scaled). Every op must compute each output element from its own
// inputs in a fixed order, independent of the batch it arrived in: this is what makes a
// sequence's logits bit-identical alone and in a batch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/logits_summary.h"
#include "core/tensor.h"

namespace hibana {

// A weight matrix [rows = out features, cols = in features] in its storage dtype. For fp8
// checkpoints `scale` holds one f32 multiplier per (block_rows x block_cols) block.
struct Weight {
  Tensor w;
  Tensor scale;  // empty when the weight carries no scales
  int64_t block_rows = 0;
  int64_t block_cols = 0;

  int64_t rows() const { return w.shape[0]; }
  int64_t cols() const { return w.shape[1]; }
  bool empty() const { return w.empty(); }
  size_t nbytes() const { return w.nbytes() + (scale.empty() ? 0 : scale.nbytes()); }
};

// How the Gated DeltaNet recurrence is evaluated for multi-token passes.
enum class GdnMode {
  // 64-token chunks aligned to absolute positions use the chunked (matrix) form when a pass
  // covers them whole; other tokens use the recurrent form. Results do not depend on how a
  // prompt is split as long as splits fall on multiples of 64.
  aligned_chunks,
  // Every token uses the recurrent form: results are bit-identical for any split of the
  // tokens into passes (what exact speculation needs).
  recurrent,
};

// Where the tokens of a ragged batch come from and where their state lives. All int32 tensors
// live on the backend's device. Built once per forward pass and shared by every layer.
struct BatchLayout {
  int64_t num_tokens = 0;
  int64_t num_seqs = 0;
  int64_t page_size = 0;
  int64_t max_pages = 0;
  Tensor positions;      // [T] absolute position of each token
  Tensor token_seq;      // [T] index of the token's sequence
  Tensor seq_start;      // [S + 1] first token of each sequence; seq_start[S] = T
  Tensor page_table;     // [S, max_pages] pages holding positions [0, pos0 + n) of each sequence
  Tensor kv_slot;        // [T] page * page_size + offset that receives the token's K and V
  Tensor state_slot;     // [S] recurrent slot of each sequence (-1 when the model has none)
  Tensor snapshot_slot;  // [T] slot that receives the recurrent state after the token, or -1
                         // (never a slot of the pass's sequences: kernels read those while
                         // snapshots are written)
  GdnMode gdn_mode = GdnMode::aligned_chunks;
};

// What a backend derives from a set of weights and keeps for later calls (CUDA: the device
// table of an expert set's matrix pointers). It lives and dies with the weights it belongs to;
// a copy of the weights starts without it. Weights never change once loaded.
class BackendCache {
 public:
  BackendCache() = default;
  BackendCache(const BackendCache&) {}
  BackendCache& operator=(const BackendCache&) {
    data.reset();
    return *this;
  }
  std::shared_ptr<void> data;
};

// Per-expert weights of an MoE block: gate/up/down of expert e are gate[e], up[e], down[e].
struct ExpertWeights {
  std::vector<Weight> gate, up, down;
  // On a GPU, when each expert's up rows follow its gate rows in memory: per expert the
  // [gate ; up] matrix (2 * intermediate rows), so one grouped launch computes both. Empty
  // otherwise (and on the CPU).
  std::vector<Weight> gate_up;
  mutable BackendCache cache;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;
  // Waits until every queued op has finished (ops on a GPU return before they run).
  virtual void synchronize() {}
  // Measured copy bandwidth of the backend's memory in bytes/s (read + write), or 0 when the
  // caller should measure host memory itself.
  virtual double copy_bandwidth() { return 0.0; }
  // True when the device's memory is the host's (an integrated GPU): no host tier then.
  virtual bool unified_memory() const { return false; }
  // Free and total bytes of the device's memory now (a GPU's, shared with the host on an
  // integrated one); {0, 0} where the backend has no memory of its own (the CPU).
  struct MemoryInfo {
    int64_t free = 0;
    int64_t total = 0;
    // Allocations the GPU refused until the stream-ordered pool gave its idle memory back (CUDA:
    // each waited for the stream; from the first, the prefill products' optional pre-split
    // planes are no longer asked for).
    int64_t pool_trims = 0;
  };
  virtual MemoryInfo memory_info() { return {}; }
  // GPU time per op since the last report, when the backend was asked to time its ops
  // (HIBANA_CUDA_TIMING=1); empty otherwise.
  virtual std::string timing_report() { return {}; }

  // Graphs (CUDA): ops queued between begin_capture() and end_capture() are recorded instead of
  // run, and replay() runs the recording again with the same pointers and shapes (the data
  // behind those pointers may change between replays). Only asked when can_capture() is true.
  virtual bool can_capture() const { return false; }
  virtual void begin_capture() {}
  // The recording, or null when an op could not be recorded (the backend is usable again).
  virtual std::shared_ptr<void> end_capture() { return nullptr; }
  virtual void replay(const std::shared_ptr<void>& /*graph*/) {}

  // out[t] = table[ids[t]] (any float dtype, converted to f32).
  virtual void embedding(const Weight& table, const Tensor& ids, Tensor out) = 0;
  // RMSNorm over groups of G = weight.numel() consecutive values of each row of x [R, D]
  // (G divides D; G = D normalises whole rows, G = head_dim normalises each head):
  // y = x * rsqrt(mean(x^2) + eps) * w, or * (1 + w) when zero_centred. x and out may alias.
  virtual void rmsnorm(const Tensor& x, const Tensor& weight, float eps, bool zero_centred,
                       Tensor out) = 0;
  // x += y, then out = rmsnorm(x) (the residual add before a norm); a GPU does both in one
  // kernel, with the same bits as the two ops.
  virtual void add_rmsnorm(Tensor x, const Tensor& y, const Tensor& weight, float eps,
                           bool zero_centred, Tensor out) {
    add(x, y);
    rmsnorm(x, weight, eps, zero_centred, out);
  }
  // out = x · wᵀ (x [R, K], w [N, K], out [R, N]); out may be a column range of a wider buffer.
  virtual void matmul(const Tensor& x, const Weight& w, Tensor out) = 0;
  // The rows of the forward pass now running (`tokens` rows in all) that are prefill blocks:
  // tokens whose whole block of kPrefillBlock absolute positions, aligned, the pass covers
  // (ranges of rows in order; empty: none). A backend may run the products of those rows — a
  // product over the pass's `tokens` rows — in a faster arithmetic of its own (CUDA: cuBLASLt
  // on bf16 terms, where the other rows keep the decode kernels' bits). Whether a token's
  // block is covered depends on its position and its own sequence's pass only, as the Gated
  // DeltaNet's chunked form (GdnMode::aligned_chunks): so a token's bits do not depend on the
  // batch, nor on how a prompt is cut into chunks of whole blocks, and decode and
  // verification passes (fewer tokens a sequence than a block) have no such rows. The model
  // sets them for a pass's layers and clears them (tokens 0) after.
  struct RowRange {
    int64_t begin, end;
  };
  static constexpr int64_t kPrefillBlock = 64;
  virtual void set_prefill_rows(int64_t /*tokens*/, std::vector<RowRange> /*rows*/) {}
  // out[:, j] = x[:, index[j]].
  virtual void gather_columns(const Tensor& x, const Tensor& index, Tensor out) = 0;
  // Rotary embedding (rotate-half / neox) of the first rot_dim dims of every head, in place.
  // x is [T, heads * head_dim].
  virtual void rope(Tensor x, int64_t heads, int64_t head_dim, int64_t rot_dim, double theta,
                    const BatchLayout& layout) = 0;
  virtual void add(Tensor x, const Tensor& y) = 0;          // x += y
  virtual void mul_sigmoid(Tensor x, const Tensor& g) = 0;  // x *= sigmoid(g), same shapes
  // x += sigmoid(g[:, 0]) * y with g [R, 1] (the shared-expert gate).
  virtual void add_sigmoid_scaled(Tensor x, const Tensor& y, const Tensor& g) = 0;
  virtual void silu_mul(const Tensor& gate, const Tensor& up, Tensor out) = 0;
  // out [R, I] = silu(x · gateᵀ) * (x · upᵀ) for gate_up = [gate ; up] (2I rows): a SwiGLU
  // MLP's first half. A GPU may do it in one launch, with the bits of the matmul and silu_mul.
  virtual void matmul_swiglu(const Tensor& x, const Weight& gate_up, Tensor out) {
    const int64_t I = gate_up.rows() / 2;
    OwnedTensor both = make_uninit_tensor(DType::f32, {x.shape[0], 2 * I}, device());
    matmul(x, gate_up, both.tensor);
    Tensor gate = both.tensor, up = both.tensor;
    gate.shape[1] = up.shape[1] = I;
    up.data = both.tensor.ptr<float>() + I;
    silu_mul(gate, up, out);
  }

  // Attention over paged KV. Pages are [num_pages, kv_heads, page_size, head_dim].
  virtual void store_kv(const Tensor& k, const Tensor& v, Tensor k_pages, Tensor v_pages,
                        const BatchLayout& layout) = 0;
  // What an attention layer does before attending, in place: every head of q [T, heads * hd]
  // and of k [T, kv_heads * hd] normalised (rmsnorm with q_norm / k_norm, head_dim weights),
  // the rotary embedding of both, then k and v stored into the pages. The default runs
  // rmsnorm, rope and store_kv; a GPU does it all in one kernel, with the same bits.
  struct AttentionPrep {
    int64_t heads, kv_heads, head_dim, rot_dim;
    double theta;
    float eps;
    bool zero_centred;
  };
  virtual void attention_prep(Tensor q, Tensor k, const Tensor& v, const Tensor& q_norm,
                              const Tensor& k_norm, const AttentionPrep& a, Tensor k_pages,
                              Tensor v_pages, const BatchLayout& layout) {
    rmsnorm(q, q_norm, a.eps, a.zero_centred, q);
    rmsnorm(k, k_norm, a.eps, a.zero_centred, k);
    rope(q, a.heads, a.head_dim, a.rot_dim, a.theta, layout);
    rope(k, a.kv_heads, a.head_dim, a.rot_dim, a.theta, layout);
    store_kv(k, v, k_pages, v_pages, layout);
  }
  // Causal GQA attention of every token over positions [0, its own]; q and out [T, heads*hd].
  virtual void attention(const Tensor& q, int64_t heads, const Tensor& k_pages,
                         const Tensor& v_pages, float scale, const BatchLayout& layout,
                         Tensor out) = 0;
  // attention, then out *= sigmoid(gate) (a gated attention's output gate, gate [T, heads*hd]);
  // a GPU applies the gate where it writes the output, with the same bits.
  virtual void attention_gated(const Tensor& q, int64_t heads, const Tensor& k_pages,
                               const Tensor& v_pages, float scale, const BatchLayout& layout,
                               const Tensor& gate, Tensor out) {
    attention(q, heads, k_pages, v_pages, scale, layout, out);
    mul_sigmoid(out, gate);
  }

  // Gated DeltaNet. conv: causal depthwise conv1d + SiLU over x [T, C] with kernel w [C, K],
  // carrying the last K-1 inputs per sequence in conv_states [slots, C, K-1].
  virtual void gdn_conv(const Tensor& x, const Tensor& w, Tensor conv_states,
                        const BatchLayout& layout, Tensor out) = 0;
  // out = x · wᵀ, then conv_out = gdn_conv of out's first C = conv_w.shape[0] columns (a DeltaNet
  // layer's input projection and conv). A GPU may apply the conv as its decode kernel stores
  // the product, with the bits of the two ops.
  virtual void matmul_conv(const Tensor& x, const Weight& w, const Tensor& conv_w,
                           Tensor conv_states, const BatchLayout& layout, Tensor out,
                           Tensor conv_out) {
    matmul(x, w, out);
    Tensor in = out;
    in.shape[1] = conv_w.shape[0];
    gdn_conv(in, conv_w, conv_states, layout, conv_out);
  }
  struct GdnShape {
    int64_t key_heads, value_heads, key_dim, value_dim;
  };
  // qkv [T, 2*nk*dk + nv*dv] (conv output: all q heads, all k heads, all v heads), b and a
  // [T, nv]; A_log, dt_bias [nv] f32. States [slots, nv, dk, dv] f32. out [T, nv*dv].
  virtual void gdn_recurrence(const Tensor& qkv, const Tensor& b, const Tensor& a,
                              const Tensor& A_log, const Tensor& dt_bias, const GdnShape& shape,
                              Tensor states, const BatchLayout& layout, Tensor out) = 0;
  // out = rmsnorm(x) * w * silu(z) over groups of G = w.numel() values (the GDN output gate,
  // one group per value head).
  virtual void gated_rmsnorm(const Tensor& x, const Tensor& z, const Tensor& w, float eps,
                             Tensor out) = 0;
  // out = gated_rmsnorm(x, z, norm, eps) · wᵀ: a DeltaNet layer's output gate and projection.
  // x may be left normalised (the default normalises it in place); a GPU applies the norm as its
  // decode kernel loads the activations, with the bits of the two ops.
  virtual void matmul_gated_norm(Tensor x, const Tensor& z, const Tensor& norm, float eps,
                                 const Weight& w, Tensor out) {
    gated_rmsnorm(x, z, norm, eps, x);
    matmul(x, w, out);
  }

  // MoE: softmax over router logits [T, E] in f32, top-k, optional renormalisation, into ids
  // and weights [T, k]. With a shared_gate ([T, 1] logits of a shared expert's gate; empty:
  // none) they are [T, k + 1] and column k is the shared expert as one more pair: id E, weight
  // sigmoid(shared_gate) (moe_experts then computes it with the routed ones, as expert E).
  virtual void moe_route(const Tensor& logits, int64_t k, bool renormalise,
                         const Tensor& shared_gate, Tensor ids, Tensor weights) = 0;
  // out[t] = sum_j weights[t, j] * down_e(silu(gate_e(x[t])) * up_e(x[t])), e = ids[t, j];
  // pairs whose id is -1 are skipped (they add nothing, whatever their weight).
  virtual void moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                           const ExpertWeights& experts, Tensor out) = 0;
  // moe_route, then moe_experts of x on its pairs (nothing in between: no expert parallelism),
  // ids and weights receiving the routing; experts must be the routed ones, plus the shared
  // expert as expert E when there is a shared_gate. Then, with `then`, add_rmsnorm(then->x,
  // out, ...): the FFN's output joins the residual stream and the next layer's input norm
  // (then->normed may be x: it is written after the experts have read x). A GPU groups the
  // pairs by expert in the routing's launch, and combines the experts' outputs, adds and
  // normalises in one kernel, with the same bits.
  struct ResidualNorm {
    Tensor x;  // the residual stream, += out
    Tensor weight;
    float eps;
    bool zero_centred;
    Tensor normed;  // rmsnorm(x) with weight
  };
  virtual void moe_route_experts(const Tensor& x, const Tensor& logits, int64_t k, bool renormalise,
                                 const Tensor& shared_gate, const ExpertWeights& experts,
                                 Tensor ids, Tensor weights, Tensor out, const ResidualNorm* then) {
    moe_route(logits, k, renormalise, shared_gate, ids, weights);
    moe_experts(x, ids, weights, experts, out);
    if (then) add_rmsnorm(then->x, out, then->weight, then->eps, then->zero_centred, then->normed);
  }
  // Expert parallelism, in place on moe_route's output: an id in [first, first + count) becomes
  // id - first (an index into this rank's experts); any other becomes -1 with weight 0. The
  // default throws Error(unsupported): a backend that runs expert parallelism overrides it.
  virtual void moe_keep_experts(Tensor /*ids*/, Tensor /*weights*/, int64_t /*first*/,
                                int64_t /*count*/) {
    throw Error(ErrorKind::unsupported,
                "expert parallelism is not implemented on the " + name() + " backend");
  }

  // Copies a recurrent slot (conv window and delta state) of one layer: dst <- src.
  virtual void copy_slot(Tensor states, int64_t src, int64_t dst) = 0;

  // Sampling without moving whole rows (core/logits_summary.h): out [R, summary_words(k)]
  // i32 gets the summary of each row of f32 logits [R, V], temperature[r] as summarise_row
  // takes it. The default runs summarise_row on host memory.
  virtual void logits_summary(const Tensor& logits, const std::vector<float>& temperature,
                              int64_t k, Tensor out) {
    summarise_rows(logits, temperature, k, out);
  }
  // out = f32 logits [R, V] with row r's sampling penalties applied (core/logits_summary.h:
  // penalise_rows is the reference, bit for bit). The default runs it on host memory.
  virtual void penalise_rows(const Tensor& logits, const LogitsPenalties& penalties, Tensor out) {
    hibana::penalise_rows(logits, penalties, out);
  }
};

std::unique_ptr<Backend> make_cpu_backend();
// True when this build has the CUDA backend and the machine has a CUDA GPU.
bool cuda_available();
// The shared memory a CUDA kernel's block may ask for once a CUDA backend exists: the GPU's
// opt-in limit (227 KiB on sm_90, 99 KiB on DGX Spark's GB10), or HIBANA_CUDA_SMEM_LIMIT bytes
// if less; the kernels that need more take other paths. 0 without CUDA.
int cuda_shared_memory_per_block();
// Whether HIBANA_CUDA_MMA_ATTENTION's tensor-core prefill attention has a kernel for this
// head_dim, GQA group (query heads per KV head) and term count (1 or 3) that fits
// cuda_shared_memory_per_block(); rows it cannot take keep the split kernels. False without
// CUDA.
bool cuda_attention_on_tensor_cores(int64_t head_dim, int64_t group, int terms);
// How many products the CUDA decode matmul has run with all their splits in one thread block
// (HIBANA_CUDA_CTA_SPLITS) in this process: a diagnostic for tests. 0 without CUDA.
int64_t cuda_one_cta_split_products();
// How many grouped (MoE) batch launches have sent their groups of up to 8 rows to the decode
// kernel first (HIBANA_CUDA_GEMV_PARTIALS_KB says when not) in this process: a diagnostic for
// tests. 0 without CUDA.
int64_t cuda_grouped_small_passes();
// The CUDA backend on GPU `device`; throws Error(unsupported) in a build without CUDA or on a
// GPU older than compute capability 8.0.
std::unique_ptr<Backend> make_cuda_backend(int device = 0);
// The stream every op of the CUDA backend runs on (a cudaStream_t), for work outside the backend
// that must be ordered with its ops (the NCCL collectives of tensor parallelism); null without
// CUDA or before the first CUDA backend exists.
void* cuda_stream_handle();
// "cpu", "cuda" or "auto" (CUDA when available, else the CPU).
std::unique_ptr<Backend> make_backend(const std::string& device);

}  // namespace hibana
