// Private to gemv_kernel.cuh: what the decode kernel does before its loop — the group a grouped
// CTA serves (its matrix and rows), and the split of its activations into shared memory.
#pragma once

#include <type_traits>

#include "backend/cuda/matmul_impl.h"
#include "backend/cuda/mma_common.cuh"

namespace hibana::cuda::mm {

// A grouped CTA's group: its matrix, its rows (the group's slice of the row list) and their
// count. known (Params::slice_known): the host's matrix, one row (out_rows takes it from
// Params::known_row); otherwise the slice's active expert, then its matrix and offsets.
// Returns false where the CTA has nothing to do (a slice past the active ones, or a group
// another launch serves).
__device__ __forceinline__ bool slice_group(const Params& p, bool known, MatPtr& mat,
                                            const int32_t*& rows, int64_t& rows_here) {
  if (known) {
    mat = p.known_mat;
    rows_here = 1;
  } else {
    const int grp = group_of_slice(p);
    if (grp < 0) return false;
    mat = p.mats[grp];
    const int32_t first = __ldcg(p.group_offset + grp);
    const int32_t end = __ldcg(p.group_offset + grp + 1);
    rows = p.group_rows + first;
    rows_here = end - first;
  }
  return !not_my_group(p, rows_here);
}

// The CTA's x_rows activation rows of its split [k_first, k_first + span) into shared memory at
// xw, row r from x row x_row_of(r) (-1: zeros), as three planes of bf16 terms per row, pitch
// words apart (the kernel's B fragments). S: the kernel's Gemv shape (its chunk KC); kWarps warps.
// kOneRow (the kernels for one row: x_early's split, and theirs after the wait) compiles one
// batch size of loads, not four: code that a kernel carries costs it time even where it does
// not run (docs/benchmarks.md, twenty-second slice).
template <typename S, int kWarps, bool kOneRow, typename RowOf>
__device__ __forceinline__ void share_activations(const Params& p, uint32_t* xw, int64_t k_first,
                                                  int span, int pitch, int x_rows,
                                                  RowOf x_row_of) {
  constexpr int KC = S::KC, kGroupsPerChunk = KC / 4, kThreads = kWarps * 32;
  // Each thread takes 4-k groups (row-major over the x rows), kBatch loads in flight before
  // it splits them: the activations come from L2, one round trip per batch. kBatch is what
  // a thread has for 2-8 rows (1, 2, 4 or 8); 4 for kOneRow, in as many rounds as it takes
  // (unused slots cost their address work too). An item's row is i / groups in floats, exact:
  // (i + 0.5) / groups is at least 0.5 / groups from an integer (items <= 1109 here, 24 bytes
  // each in kXSharedMax), the float error at most 8 * 2^-23.
  const int groups = (span + KC - 1) / KC * kGroupsPerChunk;  // 4-k groups, tail zeroed
  const int items = x_rows * groups;
  const float inv_groups = 1.0f / static_cast<float>(groups);
  auto split_x = [&](auto batch) {
    constexpr int kBatch = decltype(batch)::value;
    for (int first = 0; first < items; first += kBatch * kThreads) {
      float4 f[kBatch];
      int at[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int i = first + b * kThreads + static_cast<int>(threadIdx.x);
        f[b] = make_float4(0.f, 0.f, 0.f, 0.f);
        at[b] = -1;
        if (i >= items) continue;
        const int r = __float2int_rz((static_cast<float>(i) + 0.5f) * inv_groups);
        const int q = i - r * groups;
        at[b] = 3 * r * pitch + 2 * q;
        const int64_t xr = x_row_of(r);
        if (xr >= 0 && 4 * q < span) {
          const float* src = p.x + xr * p.ldx + k_first + 4 * q;
          // (from L2: Params::x_early reads them before the wait, where L1 could hold older
          // lines)
          f[b] = p.vec_x ? __ldcg(reinterpret_cast<const float4*>(src))
                         : make_float4(__ldcg(src), __ldcg(src + 1), __ldcg(src + 2),
                                       __ldcg(src + 3));
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (at[b] < 0) continue;
        const Split3 b01 = split3(f[b].x, f[b].y), b23 = split3(f[b].z, f[b].w);
        uint32_t* dst = xw + at[b];
        *reinterpret_cast<uint2*>(dst) = make_uint2(b01.h, b23.h);
        *reinterpret_cast<uint2*>(dst + pitch) = make_uint2(b01.m, b23.m);
        *reinterpret_cast<uint2*>(dst + 2 * pitch) = make_uint2(b01.l, b23.l);
      }
    }
  };
  if constexpr (kOneRow) {  // (the 80B's 2048 activations: one round of 4 loads a thread)
    split_x(std::integral_constant<int, 4>{});
  } else {
    const int per_thread = (items + kThreads - 1) / kThreads;
    if (per_thread <= 1) {
      split_x(std::integral_constant<int, 1>{});
    } else if (per_thread <= 2) {
      split_x(std::integral_constant<int, 2>{});
    } else if (per_thread <= 4) {
      split_x(std::integral_constant<int, 4>{});
    } else {
      split_x(std::integral_constant<int, 8>{});
    }
  }
}

}  // namespace hibana::cuda::mm
