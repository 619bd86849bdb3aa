// The MoE experts on CUDA: tokens grouped by expert on the GPU, then one grouped matmul launch
// per projection (each expert's weights read once per pass, whatever the number of tokens it
// serves), SiLU-gating, and the weighted combine of each token's k expert outputs.
#include <algorithm>
#include <mutex>
#include <vector>

#include "backend/cuda/matmul_impl.h"
#include "backend/cuda/ops.h"
#include "core/device_memory.h"

namespace hibana::cuda {

namespace {

using mm::MatPtr;
using mm::Params;

// Device copies of the pointer tables of an expert set, built on its first use and kept with
// the weights (their BackendCache): a cache keyed by addresses would hand a reloaded model,
// whose matrices can land at the old addresses in another order, the old model's tables.
struct ExpertTables {
  Buffer gate, up, down;  // MatPtr[E] each
};
std::mutex g_tables_mutex;

Buffer upload_table(const std::vector<Weight>& ws) {
  std::vector<MatPtr> host(ws.size());
  for (size_t e = 0; e < ws.size(); ++e) {
    host[e].w = ws[e].w.data;
    host[e].scale = ws[e].scale.empty() ? nullptr : ws[e].scale.data;
    check(ws[e].w.dtype == ws[0].w.dtype && ws[e].w.stride[0] == ws[0].w.stride[0] &&
              ws[e].rows() == ws[0].rows() && ws[e].cols() == ws[0].cols() &&
              ws[e].scale.empty() == ws[0].scale.empty(),
          ErrorKind::unsupported, "CUDA MoE: experts differ in dtype or shape");
  }
  Buffer b(host.size() * sizeof(MatPtr), Device::cuda);
  copy_bytes(b.data(), Device::cuda, host.data(), Device::cpu, host.size() * sizeof(MatPtr));
  return b;
}

const ExpertTables& tables_for(const ExpertWeights& ex) {
  std::lock_guard<std::mutex> lock(g_tables_mutex);
  if (!ex.cache.data) {
    auto t = std::make_shared<ExpertTables>();
    t->gate = upload_table(ex.gate);
    t->up = upload_table(ex.up);
    t->down = upload_table(ex.down);
    ex.cache.data = std::move(t);
  }
  return *static_cast<const ExpertTables*>(ex.cache.data.get());
}

// Groups the T*k (token, slot) pairs by expert: offsets [E + 1], rows (pair indices), the
// experts that got any, ascending (active[0 .. *n_active)), and where each active expert's
// tiles start in the tiled matmul's list (tile_start[0 .. *n_active]).
__global__ void group_by_expert_kernel(const int32_t* ids, int64_t pairs, int E, int32_t* offsets,
                                       int32_t* rows, int32_t* active, int32_t* n_active,
                                       int32_t* tile_start) {
  pdl_start();
  extern __shared__ int32_t counts[];  // [E] counts, then [E] cursors
  int32_t* cursor = counts + E;
  for (int e = threadIdx.x; e < E; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int e = ids[i];
    if (e >= 0 && e < E) atomicAdd(&counts[e], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t run = 0, used = 0, tiles = 0;
    for (int e = 0; e < E; ++e) {
      offsets[e] = run;
      cursor[e] = run;
      run += counts[e];
      if (counts[e] > 0) {
        tile_start[used] = tiles;
        tiles += (counts[e] + mm::kTiledTokens - 1) / mm::kTiledTokens;
        active[used++] = e;
      }
    }
    offsets[E] = run;
    tile_start[used] = tiles;
    *n_active = used;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int e = ids[i];
    if (e >= 0 && e < E) rows[atomicAdd(&cursor[e], 1)] = static_cast<int32_t>(i);
  }
}

// out[t] = sum_j weights[t, j] * y[t * k + j], j ascending.
__global__ void moe_combine_kernel(const float* y, const float* weights, int64_t T, int k,
                                   int64_t H, float* out, int64_t ldo) {
  pdl_start();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * H) return;
  const int64_t t = i / H, c = i % H;
  float acc = 0.0f;
  for (int j = 0; j < k; ++j) acc = fmaf(weights[t * k + j], y[(t * k + j) * H + c], acc);
  out[t * ldo + c] = acc;
}

}  // namespace

void moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                 const ExpertWeights& experts, Tensor out) {
  const int64_t T = x.shape[0], H = x.shape[1], k = ids.shape[1];
  const int E = static_cast<int>(experts.gate.size());
  if (T == 0) return;
  check(E > 0 && experts.up.size() == experts.gate.size() &&
            experts.down.size() == experts.gate.size(),
        ErrorKind::internal, "moe: expert lists differ in length");
  const int64_t I = experts.gate[0].rows(), pairs = T * k;
  const ExpertTables& tab = tables_for(experts);

  // At most min(E, T * k) experts are used: the grouped launches have that many slices.
  const int slices = static_cast<int>(std::min<int64_t>(E, pairs));
  Scratch offsets((E + 1) * sizeof(int32_t)), rows(pairs * sizeof(int32_t)),
      active((2 * E + 2) * sizeof(int32_t));
  int32_t* n_active = active.as<int32_t>() + E;
  int32_t* tile_start = n_active + 1;
  launch_pdl(group_by_expert_kernel, 1, 1024, 2 * E * sizeof(int32_t), ids.ptr<int32_t>(), pairs, E,
             offsets.as<int32_t>(), rows.as<int32_t>(), active.as<int32_t>(), n_active, tile_start);
  launched("group_by_expert_kernel");

  Scratch gate(pairs * I * sizeof(float)), up(pairs * I * sizeof(float)),
      y(pairs * H * sizeof(float));
  Tensor gt(gate.as<float>(), DType::f32, {pairs, I}, Device::cuda);
  Tensor ut(up.as<float>(), DType::f32, {pairs, I}, Device::cuda);
  auto grouped = [&](const Weight& w0, const Buffer& table, const Tensor& in, int x_div,
                     float* dst) {
    Params p{};
    mm::describe_weight(w0, p);
    mm::describe_x(in, p);
    p.out = dst;
    p.ldo = p.N;
    p.M = pairs;
    p.mats = static_cast<const MatPtr*>(table.data());
    p.group_offset = offsets.as<int32_t>();
    p.group_rows = rows.as<int32_t>();
    p.x_div = x_div;
    p.active = active.as<int32_t>();
    p.n_active = n_active;
    p.tile_start = tile_start;
    // An expert serves each token at most once, so no group has more than T rows.
    mm::run(p, elt_of(w0.w.dtype), true, T, slices);
  };
  grouped(experts.gate[0], tab.gate, x, static_cast<int>(k), gate.as<float>());
  grouped(experts.up[0], tab.up, x, static_cast<int>(k), up.as<float>());
  silu_mul(gt, ut, gt);
  grouped(experts.down[0], tab.down, gt, 1, y.as<float>());
  launch_pdl(moe_combine_kernel, blocks_for(T * H, 256), 256, 0, y.as<float>(),
             weights.ptr<float>(), T, static_cast<int>(k), H, out.ptr<float>(), ld(out));
  launched("moe_combine_kernel");
}

}  // namespace hibana::cuda
