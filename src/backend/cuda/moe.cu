// The MoE experts on CUDA: tokens grouped by expert on the GPU (moe_route.cu), then one grouped
// matmul launch per projection (each expert's weights read once per pass, whatever the number
// of tokens it serves; gate and up in one launch when move_weights stacked them), SiLU-gating,
// and the weighted combine of each token's k expert outputs.
#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/cuda/matmul_impl.h"
#include "backend/cuda/mma_common.cuh"
#include "backend/cuda/moe_impl.h"
#include "backend/cuda/norm_impl.cuh"
#include "backend/cuda/ops.h"
#include "core/device_memory.h"

namespace hibana::cuda {

namespace {

using mm::MatPtr;
using mm::Params;

// Device copies of the pointer tables of an expert set, built on its first use and kept with
// the weights (their BackendCache): a cache keyed by addresses would hand a reloaded model,
// whose matrices can land at the old addresses in another order, the old model's tables.
// A grouped launch describes every matrix by the first (mm::describe_weight), and its
// vector loads need every matrix 16-byte aligned, not only the first: `aligned` says whether
// they all are (where one is not, the launch takes the unvectorised kernel).
struct ExpertTable {
  Buffer ptrs;  // MatPtr[E]
  bool aligned = true;
};
struct ExpertTables {
  ExpertTable gate, up, down, gate_up;  // (gate_up: when the experts have it)
};
std::mutex g_tables_mutex;

ExpertTable upload_table(const std::vector<Weight>& ws) {
  std::vector<MatPtr> host(ws.size());
  ExpertTable t;
  for (size_t e = 0; e < ws.size(); ++e) {
    t.aligned = t.aligned && reinterpret_cast<uintptr_t>(ws[e].w.data) % 16 == 0;
    host[e].w = ws[e].w.data;
    host[e].scale = ws[e].scale.empty() ? nullptr : ws[e].scale.data;
    check(ws[e].w.dtype == ws[0].w.dtype && ws[e].w.stride[0] == ws[0].w.stride[0] &&
              ws[e].rows() == ws[0].rows() && ws[e].cols() == ws[0].cols() &&
              ws[e].scale.empty() == ws[0].scale.empty(),
          ErrorKind::unsupported, "CUDA MoE: experts differ in dtype or shape");
  }
  t.ptrs = Buffer(host.size() * sizeof(MatPtr), Device::cuda);
  copy_bytes(t.ptrs.data(), Device::cuda, host.data(), Device::cpu, host.size() * sizeof(MatPtr));
  return t;
}

const ExpertTables& tables_for(const ExpertWeights& ex) {
  std::lock_guard<std::mutex> lock(g_tables_mutex);
  if (!ex.cache.data) {
    auto t = std::make_shared<ExpertTables>();
    t->gate = upload_table(ex.gate);
    t->up = upload_table(ex.up);
    t->down = upload_table(ex.down);
    if (!ex.gate_up.empty()) t->gate_up = upload_table(ex.gate_up);
    ex.cache.data = std::move(t);
  }
  return *static_cast<const ExpertTables*>(ex.cache.data.get());
}

// The pairs' outputs y [T * k, H] and their weights and ids [T, k]: what the combine adds.
struct Pairs {
  const float* y;
  const float* weights;
  const int32_t* ids;
  int k;
  int64_t H;
};

// sum_j weights[t, j] * y[t * k + j][c], j ascending, pairs with id -1 skipped (their y row was
// never written). kBatch pairs' ids, weights and outputs are loaded before any is used: one
// round trip per batch of pairs. y has a row for every pair, used or not, so the loads are in
// bounds. (16 pairs a round trip, the 80B's 11 in one, measured the same: 1.004 and 0.999 at
// batch 1 and 8, twenty-first slice.)
__device__ __forceinline__ float combine_column(const Pairs& p, int64_t t, int64_t c) {
  constexpr int kBatch = 8;
  const int k = p.k;
  float acc = 0.0f;
  for (int j0 = 0; j0 < k; j0 += kBatch) {
    int32_t id[kBatch];
    float wv[kBatch], yv[kBatch];
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
      const int64_t j = t * k + min(j0 + q, k - 1);
      id[q] = j0 + q < k ? p.ids[j] : -1;
      wv[q] = p.weights[j];
      yv[q] = p.y[j * p.H + c];
    }
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
      if (id[q] >= 0) acc = fmaf(wv[q], yv[q], acc);
    }
  }
  return acc;
}

// out[t] = the combine of token t's pairs.
__global__ void moe_combine_kernel(Pairs p, int64_t T, float* out, int64_t ldo) {
  pdl_start();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * p.H) return;
  const int64_t t = i / p.H, c = i % p.H;
  out[t * ldo + c] = combine_column(p, t, c);
}

// The residual stream and the next layer's input norm (add_rmsnorm's wide kernel) that the
// combine's kernel takes: x[t] += out[t], normed[t] = rmsnorm(x[t]).
struct ResidualArgs {
  float* x;
  int64_t ldx;
  const float* w;
  float eps;
  bool zero_centred;
  float* normed;
  int64_t ldn;
};

// The combine, the residual add and the norm in one kernel, the combine spread as
// moe_combine_kernel spreads it: CTA (b, t) takes columns b * kWideThreads .. of token t, stores
// their combine and adds it to x there (x + out, the add of add_rmsnorm's wide kernel); the
// token's last CTA to finish (last_to_finish: the others' stores are visible to it) then
// normalises the row from L2 with wide_norm_group, as add_rmsnorm's wide kernel does after its
// add. The bits of the three ops, one launch fewer than them. counters: [T], zero.
template <int kC>
__global__ void __launch_bounds__(kWideThreads)
    combine_add_norm_split_kernel(Pairs p, float* out, int64_t ldo, ResidualArgs r, int* counters) {
  const int64_t H = p.H, t = blockIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kWideThreads + threadIdx.x;
  float wv[kC];
  wide_norm_weights(r.w, H, wv);  // constants: before the wait (the last CTA's use)
  pdl_start();
  float* xr = r.x + t * r.ldx;
  if (c < H) {
    // x loaded with the pairs' outputs: read after the store to out (which may alias it, for
    // the compiler), it was one more round trip to L2 on the step's chain.
    const float xv = xr[c];
    const float v = combine_column(p, t, c);
    out[t * ldo + c] = v;
    xr[c] = xv + v;
  }
  if (!mm::last_to_finish(counters + t, static_cast<int>(gridDim.x))) return;
  wide_norm_group<false, false, true>(xr, nullptr, nullptr, r.w, wv, r.eps, r.zero_centred, H,
                                      r.normed + t * r.ldn);
}

// Expert parallelism: ids in [first, first + count) become local indices, others -1 with
// weight 0.
__global__ void keep_experts_kernel(int32_t* ids, float* weights, int64_t pairs, int64_t first,
                                    int64_t count) {
  pdl_start();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= pairs) return;
  const int64_t e = ids[i];
  if (e >= first && e < first + count) {
    ids[i] = static_cast<int32_t>(e - first);
  } else {
    ids[i] = -1;
    weights[i] = 0.0f;
  }
}

// A pass's prefill tokens' rows (PrefillTerms) rounded to their first `terms` bf16 terms
// (split3's h, or h + m, which an f32 holds exactly), from src into dst (src itself or a copy):
// row r is token r / row_div's. Every matmul kernel then finds those rows' other terms zero,
// whichever kernel an expert's group lands in, so their bits do not depend on it; the tiled
// kernel skips the zero terms' products in a tile of such rows alone (Params::prefill_mask).
__global__ void round_prefill_rows_kernel(const float* src, int64_t lds, float* dst, int64_t ldd,
                                          int64_t rows, int64_t cols, int64_t row_div,
                                          PrefillTerms prefill) {
  pdl_start();
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const bool short_row = prefill.mask[r / row_div] != 0;
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      float v = src[r * lds + c];
      if (short_row) {
        const mm::Split3 s = mm::split3(v, 0.0f);
        v = prefill.terms == 1 ? mm::low_of(s.h) : mm::low_of(s.h) + mm::low_of(s.m);
      }
      dst[r * ldd + c] = v;
    }
  }
}

void round_prefill_rows(const float* src, int64_t lds, float* dst, int64_t ldd, int64_t rows,
                        int64_t cols, int64_t row_div, const PrefillTerms& prefill) {
  if (rows == 0 || cols == 0) return;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((cols + 255) / 256, 16)),
                  static_cast<unsigned>(std::min<int64_t>(rows, 4096)));
  launch_pdl(round_prefill_rows_kernel, grid, 256, 0, src, lds, dst, ldd, rows, cols, row_div,
             prefill);
  launched("round_prefill_rows_kernel");
}

}  // namespace

namespace {

// moe_experts on pairs already grouped by expert, with the fusions f (f.route is the caller's);
// with `then`, its add_rmsnorm in the combine's kernel (which must be add_rmsnorm's wide
// kernel).
void experts_grouped(const Tensor& x, const Tensor& ids, const Tensor& weights,
                     const ExpertWeights& experts, const Grouping& groups, Tensor out,
                     const Backend::ResidualNorm* then, const MoeFusions& f) {
  const int64_t T = x.shape[0], H = x.shape[1], k = ids.shape[1];
  const int64_t I = experts.gate[0].rows(), pairs = T * k;
  const ExpertTables& tab = tables_for(experts);
  // At most min(E, T * k) experts are used: the grouped launches have that many slices.
  const int slices = static_cast<int>(std::min<int64_t>(groups.E, pairs));

  // A pass's prefill tokens carry f.prefill.terms terms: their rows of x, and below of the down
  // projection's input, rounded to those terms first (round_prefill_rows_kernel).
  std::unique_ptr<Scratch> rounded;
  Tensor xin = x;
  if (f.prefill.mask) {
    rounded = std::make_unique<Scratch>(T * H * sizeof(float));
    xin = Tensor(rounded->as<float>(), DType::f32, {T, H}, Device::cuda);
    round_prefill_rows(x.ptr<float>(), ld(x), xin.ptr<float>(), H, T, H, 1, f.prefill);
  }
  // gate and up of each pair side by side: [pairs, 2I], gate in the first I columns.
  Scratch gate_up(pairs * 2 * I * sizeof(float)), y(pairs * H * sizeof(float));
  Tensor gt(gate_up.as<float>(), DType::f32, {pairs, I}, Device::cuda);
  Tensor ut(gate_up.as<float>() + I, DType::f32, {pairs, I}, Device::cuda);
  gt.stride[0] = ut.stride[0] = 2 * I;
  // pair > 0: the SwiGLU launch (gate_up, out silu(gate) * up), where the decode kernel takes
  // every group (false otherwise, nothing launched). reads_x: a gate/up launch (x is the
  // experts' input: Params::x_early and slice_known apply), else the down
  // projection (its routing is two or more launches old: Params::routing_ready, its weights
  // streamed before its wait where f.prefetch_down).
  auto grouped = [&](const Weight& w0, const ExpertTable& table, const Tensor& in, int x_div,
                     float* dst, int64_t ldo, int64_t pair, bool reads_x) {
    Params p{};
    mm::describe_weight(w0, p);
    p.vec_w = p.vec_w && table.aligned;
    mm::describe_x(in, p);
    p.out = dst;
    p.ldo = ldo;
    p.M = pairs;
    p.mats = static_cast<const MatPtr*>(table.ptrs.data());
    p.group_offset = groups.offsets.as<int32_t>();
    p.group_rows = groups.rows.as<int32_t>();
    p.x_div = x_div;
    p.active = groups.active.as<int32_t>();
    p.n_active = groups.n_active();
    p.tile_start = groups.tile_start();
    p.pair = pair;
    p.routing_ready = !reads_x && f.prefetch_down;
    p.prefill_mask = f.prefill.mask;
    p.prefill_terms = f.prefill.terms;
    p.token_div = k;
    p.x_early = reads_x && f.x_early && T == 1;
    // f.shared_early: the stacked set's last expert is the shared one, at one token the last
    // pair and the last slice
    if (p.x_early && f.shared_early && !experts.gate_up.empty()) {
      const Weight& shared = experts.gate_up.back();
      p.slice_known = true;
      p.known_slice = static_cast<int>(pairs - 1);
      p.known_row = static_cast<int>(pairs - 1);
      p.known_mat = {shared.w.data, shared.scale.empty() ? nullptr : shared.scale.data};
    }
    const Elt elt = elt_of(w0.w.dtype);
    if (pair > 0 && !mm::swiglu_fits(p, elt, T)) return false;
    // An expert serves each token at most once, so no group has more than T rows.
    mm::run(p, elt, true, T, slices);
    return true;
  };
  const int kx = static_cast<int>(k);
  if (!experts.gate_up.empty()) {  // one launch for both, with the gating where it can
    if (!f.swiglu ||
        !grouped(experts.gate_up[0], tab.gate_up, xin, kx, gt.ptr<float>(), 2 * I, I, true)) {
      grouped(experts.gate_up[0], tab.gate_up, xin, kx, gt.ptr<float>(), 2 * I, 0, true);
      silu_mul(gt, ut, gt);
    }
  } else {
    grouped(experts.gate[0], tab.gate, xin, kx, gt.ptr<float>(), 2 * I, 0, true);
    grouped(experts.up[0], tab.up, xin, kx, ut.ptr<float>(), 2 * I, 0, true);
    silu_mul(gt, ut, gt);
  }
  if (f.prefill.mask) {
    round_prefill_rows(gt.ptr<float>(), 2 * I, gt.ptr<float>(), 2 * I, pairs, I, k, f.prefill);
  }
  // The down projection's routing was written two or more launches back (gate/up in between):
  // its decode kernel may stream its weights before it waits.
  grouped(experts.down[0], tab.down, gt, 1, y.as<float>(), H, 0, false);
  const Pairs pairs_out{y.as<float>(), weights.ptr<float>(), ids.ptr<int32_t>(),
                        static_cast<int>(k), H};
  if (then) {
    check(add_rmsnorm_is_wide(then->x, then->weight, then->normed) && then->x.shape[0] == T &&
              then->x.shape[1] == H && then->normed.shape[0] == T && then->normed.shape[1] == H,
          ErrorKind::internal, "moe: the residual and its norm must be [T, H]");
    const ResidualArgs r{then->x.ptr<float>(),      ld(then->x),
                         then->weight.ptr<float>(), then->eps,
                         then->zero_centred,        then->normed.ptr<float>(),
                         ld(then->normed)};
    const dim3 grid(static_cast<unsigned>((H + kWideThreads - 1) / kWideThreads),
                    static_cast<unsigned>(T));
    int* counters = mm::finish_counters(static_cast<size_t>(T));
    with_wide_cached(H, [&](auto c) {
      launch_pdl(combine_add_norm_split_kernel<decltype(c)::value>, grid, kWideThreads, 0,
                 pairs_out, out.ptr<float>(), ld(out), r, counters);
    });
    launched("combine_add_norm_split_kernel");
    return;
  }
  launch_pdl(moe_combine_kernel, blocks_for(T * H, 256), 256, 0, pairs_out, T, out.ptr<float>(),
             ld(out));
  launched("moe_combine_kernel");
}

void check_experts(const ExpertWeights& experts) {
  check(!experts.gate.empty() && experts.up.size() == experts.gate.size() &&
            experts.down.size() == experts.gate.size(),
        ErrorKind::internal, "moe: expert lists differ in length");
}

}  // namespace

void moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                 const ExpertWeights& experts, Tensor out, bool fuse_swiglu, bool prefetch_down,
                 PrefillTerms prefill) {
  if (x.shape[0] == 0) return;
  check_experts(experts);
  const Grouping groups(static_cast<int>(experts.gate.size()), ids.numel());
  group_by_expert(ids.ptr<int32_t>(), groups);
  MoeFusions f{};
  f.swiglu = fuse_swiglu;
  f.prefetch_down = prefetch_down;
  f.prefill = prefill;
  experts_grouped(x, ids, weights, experts, groups, out, nullptr, f);
}

bool route_group_fits(int64_t tokens, const Tensor& logits, const Tensor& shared_gate,
                      const ExpertWeights& experts) {
  // The routing's ids are [0, E) and, with a shared expert, E: the expert set must be that long.
  const int64_t E = logits.shape[1] + (shared_gate.empty() ? 0 : 1);
  return tokens <= kRouteGroupTokens && static_cast<int64_t>(experts.gate.size()) == E;
}

void moe_route_experts(const Tensor& x, const Tensor& logits, int64_t k, bool renormalise,
                       const Tensor& shared_gate, const ExpertWeights& experts, Tensor ids,
                       Tensor weights, Tensor out, const Backend::ResidualNorm* then,
                       const MoeFusions& f) {
  const int64_t T = x.shape[0];
  check(!f.route || route_group_fits(T, logits, shared_gate, experts), ErrorKind::internal,
        "moe_route_experts: the routing cannot be grouped in its launch");
  if (T == 0) return;
  check_experts(experts);
  check(ids.is_contiguous(), ErrorKind::internal, "moe_route_experts: ids must be contiguous");
  const Grouping groups(static_cast<int>(experts.gate.size()), ids.numel());
  if (f.route) {
    route_and_group(logits, k, renormalise, shared_gate, ids, weights, groups);
  } else {
    moe_route(logits, k, renormalise, shared_gate, ids, weights);
    group_by_expert(ids.ptr<int32_t>(), groups);
  }
  // f.shared_early: with the shared expert folded in as the set's last (a shared gate), one
  // token's gate/up slice of it is known before the routing (Params::slice_known).
  MoeFusions g = f;
  g.shared_early = f.shared_early && !shared_gate.empty() && T == 1 &&
                   static_cast<int64_t>(experts.gate.size()) == logits.shape[1] + 1 &&
                   experts.gate_up.size() == experts.gate.size();
  experts_grouped(x, ids, weights, experts, groups, out, then, g);
}

namespace {
constexpr int kMarkRanges = 16;
struct MarkRanges {
  int n;
  int64_t begin[kMarkRanges], end[kMarkRanges];
};
__global__ void mark_tokens_kernel(uint8_t* mask, int64_t tokens, MarkRanges r) {
  pdl_start();
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= tokens) return;
  for (int i = 0; i < r.n; ++i) {
    if (t >= r.begin[i] && t < r.end[i]) mask[t] = 1;
  }
}
}  // namespace

void mark_prefill_tokens(const std::vector<Backend::RowRange>& rows, int64_t tokens,
                         uint8_t* mask) {
  if (tokens == 0) return;
  HIBANA_CUDA(cudaMemsetAsync(mask, 0, static_cast<size_t>(tokens), stream()));
  for (size_t i0 = 0; i0 < rows.size(); i0 += kMarkRanges) {  // kMarkRanges a launch
    MarkRanges r{};
    for (size_t i = i0; i < rows.size() && r.n < kMarkRanges; ++i, ++r.n) {
      r.begin[r.n] = rows[i].begin;
      r.end[r.n] = rows[i].end;
    }
    launch_pdl(mark_tokens_kernel, blocks_for(tokens, 256), 256, 0, mask, tokens, r);
    launched("mark_tokens_kernel");
  }
}

void moe_keep_experts(Tensor ids, Tensor weights, int64_t first, int64_t count) {
  check(ids.is_contiguous() && weights.is_contiguous() && ids.numel() == weights.numel(),
        ErrorKind::internal, "moe_keep_experts: ids and weights must be contiguous pairs");
  const int64_t pairs = ids.numel();
  if (pairs == 0) return;
  launch_pdl(keep_experts_kernel, blocks_for(pairs, 256), 256, 0, ids.ptr<int32_t>(),
             weights.ptr<float>(), pairs, first, count);
  launched("keep_experts_kernel");
}

}  // namespace hibana::cuda
