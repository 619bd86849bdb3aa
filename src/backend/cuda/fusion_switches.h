// Private to cuda_backend.cu: the switches of the decode fusions it chooses between, each
// read from the environment at every call (tests switch them; tools/gpu/check.sh sweeps them),
// with what was measured for its default. Each fused form keeps the bits of the ops it joins.
#pragma once

#include "backend/cuda/common.cuh"

namespace hibana::cuda {

// HIBANA_CUDA_FUSED_SWIGLU: the decode matmul of a stacked [gate ; up] (dense MLPs and the
// MoE experts at up to 8 tokens) also computes silu(gate) * up, one launch fewer per layer
// (the same bits). On by default (8B decode +1.4% at batch 1, 80B +1.4%: docs/benchmarks.md,
// fourteenth slice); =0 turns it off. Read at every call (tests switch it).
inline bool fused_swiglu() { return knob_on("HIBANA_CUDA_FUSED_SWIGLU", true); }
// HIBANA_CUDA_GROUPED_PREFETCH: the MoE down projection's decode kernel starts its weight
// copies before waiting for the kernel before it, as plain products do (its routing is older).
// On by default (80B decode +0.8% at batch 1 alone, +2.3% with the fused SwiGLU); =0 turns it
// off. Read at every call.
inline bool grouped_prefetch() { return knob_on("HIBANA_CUDA_GROUPED_PREFETCH", true); }
// HIBANA_CUDA_GROUPED_PREFILL=N (1, 2 or 3): the MoE experts' rows of a pass's prefill tokens
// (Backend::set_prefill_rows) carry only the activations' first N bf16 terms (rounded to them
// beforehand, moe.cu; mm::Params::prefill_mask): the tiled kernel runs N thirds of the products
// where a tile has no other rows. 2, the default, carries what cuBLASLt's prefill products carry
// (~2^-18 of each activation left out): the 80B's 8k prefill 1.04-1.05 times as fast as with 3 in
// 4096-token passes, 1.056 in 512-token ones (a prompt beside decodes; 0.91 while such launches
// went wholly to the tiled kernel, whose 64-token tiles an expert's ~10 rows leave mostly empty):
// H100, docs/benchmarks.md, thirty-eighth slice. 3 gives those rows the decode kernels' bits. With
// 1 the qwen3_moe and qwen3_5_moe chunked goldens fail (last-position logits 0.053 from
// transformers' against 1e-3; thirty-fifth slice). Read when a pass starts.
inline int grouped_prefill_terms() {
  const int64_t n = knob("HIBANA_CUDA_GROUPED_PREFILL", 2);  // (2 for "0", unset, not a number)
  check(n <= 3, ErrorKind::invalid_argument, "HIBANA_CUDA_GROUPED_PREFILL must be 1, 2 or 3");
  return static_cast<int>(n);
}
// HIBANA_CUDA_FUSED_ROUTING: up to 32 tokens' routing and the grouping of their pairs by
// expert in one launch, one fewer per MoE layer (the same bits). On by default (80B decode
// +0.5% at batch 1 alone, +3.1% with the two below: docs/benchmarks.md, fifteenth slice); =0
// turns it off. Read at every call (tests switch it), as the others.
inline bool fused_routing() { return knob_on("HIBANA_CUDA_FUSED_ROUTING", true); }
// HIBANA_CUDA_FUSED_MATMUL_CONV: a DeltaNet layer's input projection applies the conv as its
// decode kernel stores the outputs, one launch fewer per DeltaNet layer (the same bits). On by
// default: 80B decode 1.007 and 1.014 times as fast at batch 1 in two calls, 1.000 at 8 (H100,
// docs/benchmarks.md, twentieth slice; 0.993 in the sixteenth, before the 6 KiB fp8 ring and
// the routing by one warp); =0 turns it off.
inline bool fused_matmul_conv() { return knob_on("HIBANA_CUDA_FUSED_MATMUL_CONV", true); }
// HIBANA_CUDA_COMBINE_NORM_SPLIT: the MoE combine also adds the FFN output to the residual
// stream and applies the next layer's input norm, one launch fewer per MoE layer, with the
// combine spread over its usual CTAs and each token's norm by its last CTA to finish (the same
// bits). On by default: 80B decode 1.014 times as fast at batch 1, 1.008 at 8 (H100,
// docs/benchmarks.md, twentieth slice); =0 runs add_rmsnorm as its own op.
inline bool combine_norm_split() { return knob_on("HIBANA_CUDA_COMBINE_NORM_SPLIT", true); }
// HIBANA_CUDA_EXPERTS_X_EARLY: at batch 1 the experts' gate/up kernels split the token's
// activations before their wait, before the routing is known (mm::Params::x_early; the same
// bits). On by default (80B decode 1.018 times as fast at batch 1, H100, docs/benchmarks.md,
// twentieth slice); =0 splits them after the wait.
inline bool experts_x_early() { return knob_on("HIBANA_CUDA_EXPERTS_X_EARLY", true); }
// HIBANA_CUDA_SHARED_EXPERT_EARLY=1: at batch 1 the shared expert's gate/up CTAs (whose matrix
// and row the host knows) stream and multiply while the routing runs, and wait only before they
// store (mm::Params::slice_known; the same bits). On: 1.032 at batch 1 on the 80B (twenty-first
// slice); =0 runs it after the routing like the routed experts.
inline bool shared_expert_early() { return knob_on("HIBANA_CUDA_SHARED_EXPERT_EARLY", true); }
// HIBANA_CUDA_FUSED_ATTENTION_GATE: the attention merge applies a gated attention's output
// gate, one launch fewer per gated attention layer (the same bits). On by default (80B decode
// +0.5% at batch 1 alone); =0 turns it off.
inline bool fused_attention_gate() { return knob_on("HIBANA_CUDA_FUSED_ATTENTION_GATE", true); }

// Measured slower and removed (their code is in 5675f6a): the DeltaNet's gated norm applied as
// the output projection loads its activations (HIBANA_CUDA_FUSED_MATMUL_NORM: 0.991 and 0.977
// on the 80B at batch 1), the combine and norm in one CTA per token (FUSED_COMBINE_NORM: 0.960,
// then 1.004 where the split form above gave 1.014), and plain products releasing the next
// kernel before their own wait (RELEASE_BEFORE_WAIT: 0.968). The experts' kernels routing the
// token themselves at batch 1 (ROUTE_IN_EXPERTS: 0.995 over three rounds on an H100; the
// routing added 4.4 us to the gate/up's critical time, what its own launch cost) is in f09839e,
// and one token's down projection ending in the combine, add and norm (FUSED_DOWN_COMBINE:
// 0.981; the down's critical time 11.9 us against 5.4 + 5.4 for the two kernels) in 6ce6acf.
// The combine's CTAs as one thread block cluster taking the norm's sum through distributed
// shared memory (COMBINE_CLUSTER: 0.999 at batch 1, 0.995 at 8) was on a branch that did not
// outlive its session (docs/benchmarks.md, twenty-sixth slice, says what it did). The router's
// product routing its token in its own launch, by its last CTA (ROUTE_IN_ROUTER: 0.996 at batch
// 1 over three rounds, H100, thirtieth slice) is in 6217715 and fd0689d. One token's down
// projection ending in the combine, add and norm with no L2 pass of the pairs' outputs, a CTA
// per 16 rows of every pair and a warp a pair (DOWN_COMBINE: 0.984 at batch 1, 1.003 at 8, H100,
// thirty-ninth slice: its early CTAs slow the kernels after it) is in 7c95594. Earlier launches
// (fortieth slice, H100, the 80B at batch 1 / 8): the small kernels between two products
// releasing the next one before their wait (RELEASE_FIRST: 0.971 / 0.982; the 8B 1.014 at 1,
// 0.988 at 8), the decode attention asking L2 for its split's rows before its wait
// (ATTENTION_PREFETCH: 0.996 / 0.991) or, with the release, copying its older keys' first tiles
// (ATTENTION_EARLY: 0.985 / 0.981), the DeltaNet recurrence reading its layout and asking L2 for
// its state (GDN_EARLY: 1.003 / 1.001, noise) are in 121d7c5. The tensor-core decode
// attention's splits of earlier keys copying their first rows before the wait (DECODE_EARLY:
// 1.008 / 1.004 over two rounds, then 0.998 over three at batch 1, H100, forty-first slice) is
// in ed7aaf5.

}  // namespace hibana::cuda
