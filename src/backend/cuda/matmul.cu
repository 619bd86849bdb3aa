// out = x · wᵀ on CUDA, for weights in f32, bf16, f16 or fp8 (with block scales), and the MoE
// experts as one grouped launch per projection.
//
// Every output element is computed in one canonical order, whatever the batch: K is cut into
// splits whose length depends only on the weight's shape; within a split, w[n,k] * x[m,k] is
// accumulated with fmaf for k ascending from zero; the split sums are then added in split
// order (total = p0, total += p1, ...). Kernels differ only in how many rows (TM) a thread
// carries and whether splits run in parallel CTAs (the last CTA of a tile adds the partials)
// or one after another in the same CTA; all of them perform exactly these operations, so a
// sequence's logits are bit-identical alone and in any batch.
//
// Tiles: 128 threads; each thread owns one weight row n and TM activation rows. Weight rows
// stream through shared memory 128 bytes at a time (cp.async, 2 to 4 stages), in rows padded
// to 144 bytes so that each quarter-warp's 16-byte reads of 8 consecutive rows hit distinct
// banks. Every configuration fits the 99 KiB of shared memory of sm_86/89/121 parts.
#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"
#include "core/device_memory.h"

namespace hibana::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kRowBytes = 128;  // weight bytes per row per stage
constexpr int kChunks = kRowBytes / 16;
constexpr int kRowPitch = 144;  // padded pitch of a weight row in shared memory

// Pipeline depth: deep for the bandwidth-bound small batches, shallower where the activation
// tile is large.
constexpr int stages_for(int tm, bool serial) { return serial ? 2 : tm <= 4 ? 4 : tm <= 16 ? 3 : 2; }
constexpr int64_t kSplitQuantum = 128;  // split lengths are multiples of this (fp8 block size)

// One weight matrix (or one expert's) as the kernel reads it.
struct MatPtr {
  const void* w;
  const void* scale;  // null when unscaled
};

struct Params {
  int64_t N, K;
  int64_t ldw;           // weight row stride, elements
  int scale_kind;        // 0 none, 1 f32, 2 bf16
  int64_t scale_ld, block_rows, block_cols;
  const float* x;
  int64_t ldx;
  float* out;
  int64_t ldo;
  int64_t M;             // rows of x (plain) or of out (grouped: tokens * k)
  int64_t split_len;
  int splits;
  float* partial;        // [splits][M][N] for split-parallel launches with splits > 1
  int* counters;         // per output tile: splits finished (the last one reduces, resets)
  bool vec_w, vec_x;     // 16-byte loads allowed
  // Plain launches read `single`; grouped launches read mats[group] and take their rows from
  // group_rows[group_offset[g] .. group_offset[g + 1]): out row r, x row r / x_div.
  MatPtr single;
  const MatPtr* mats;
  const int32_t* group_offset;
  const int32_t* group_rows;
  int x_div;
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ float scale_at(const Params& p, const void* scale, int64_t n, int64_t k) {
  const int64_t i = (n / p.block_rows) * p.scale_ld + k / p.block_cols;
  if (p.scale_kind == 1) return static_cast<const float*>(scale)[i];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(scale)[i]);
}

// TM rows per thread, G row groups per CTA (so BN = 128 / G weight rows and BM = TM * G
// activation rows), kSerial: all splits in this CTA.
template <Elt E, int TM, int G, bool kSerial, bool kGrouped>
__global__ void __launch_bounds__(kThreads) matmul_kernel(Params p) {
  constexpr int esize = EltInfo<E>::size;
  constexpr int BK = kRowBytes / esize;  // elements per stage
  constexpr int VE = 16 / esize;         // elements per 16-byte chunk
  constexpr int BN = kThreads / G, BM = TM * G;
  constexpr int XP = BK + 4;             // padded pitch of an activation row, floats
  constexpr int kStages = stages_for(TM, kSerial);
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* ws = smem;                                       // [kStages][BN][kRowPitch]
  float* xs = reinterpret_cast<float*>(smem + kStages * BN * kRowPitch);  // [kStages][BM][XP]

  const int tid = threadIdx.x;
  const int n_local = tid % BN, g = tid / BN;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int64_t n = n0 + n_local;

  // Which rows this CTA serves.
  const int m_tiles_y = kSerial ? gridDim.y : gridDim.y / p.splits;
  const int m_tile = kSerial ? blockIdx.y : blockIdx.y % m_tiles_y;
  const int split0 = kSerial ? 0 : blockIdx.y / m_tiles_y;
  MatPtr mat = p.single;
  int64_t rows_here = p.M, row_base = 0;
  const int32_t* rows = nullptr;
  if constexpr (kGrouped) {
    const int grp = blockIdx.z;
    mat = p.mats[grp];
    row_base = p.group_offset[grp];
    rows_here = p.group_offset[grp + 1] - row_base;
    rows = p.group_rows + row_base;
  }
  const int64_t m0 = static_cast<int64_t>(m_tile) * BM;
  if (m0 >= rows_here) return;

  // Global x and out rows of the BM rows of the tile (-1 past the end).
  __shared__ int64_t x_row[BM], o_row[BM];
  for (int i = tid; i < BM; i += kThreads) {
    const int64_t m = m0 + i;
    if (m >= rows_here) {
      x_row[i] = o_row[i] = -1;
    } else if constexpr (kGrouped) {
      const int64_t r = rows[m];
      o_row[i] = r;
      x_row[i] = r / p.x_div;
    } else {
      o_row[i] = x_row[i] = m;
    }
  }
  __syncthreads();

  const int64_t k_begin = kSerial ? 0 : split0 * p.split_len;
  const int64_t k_end = kSerial ? p.K : min(p.K, k_begin + p.split_len);
  const int ntiles = static_cast<int>((k_end - k_begin + BK - 1) / BK);
  const unsigned char* wbase = static_cast<const unsigned char*>(mat.w);

  auto load_tile = [&](int t, int slot) {
    const int64_t k0 = k_begin + static_cast<int64_t>(t) * BK;
    unsigned char* wdst = ws + slot * BN * kRowPitch;
    for (int c = tid; c < BN * kChunks; c += kThreads) {
      const int r = c / kChunks, part = c % kChunks;
      const int64_t gn = n0 + r, gk = k0 + part * VE;
      unsigned char* d = wdst + r * kRowPitch + part * 16;
      if (p.vec_w) {
        const bool ok = gn < p.N && gk < k_end;
        const void* src = ok ? wbase + (gn * p.ldw + gk) * esize : wbase;
        cp_async16(d, src, ok);
      } else {
        for (int e = 0; e < VE; ++e) {
          const bool ok = gn < p.N && gk + e < k_end;
          for (int b = 0; b < esize; ++b) {
            d[e * esize + b] = ok ? wbase[(gn * p.ldw + gk + e) * esize + b] : 0;
          }
        }
      }
    }
    float* xdst = xs + slot * BM * XP;
    if (p.vec_x) {
      for (int c = tid; c < BM * (BK / 4); c += kThreads) {
        const int r = c / (BK / 4), part = c % (BK / 4);
        const int64_t gk = k0 + part * 4;
        const bool ok = x_row[r] >= 0 && gk < k_end;
        const float* src = ok ? p.x + x_row[r] * p.ldx + gk : p.x;
        cp_async16(xdst + r * XP + part * 4, src, ok);
      }
    } else {
      for (int c = tid; c < BM * BK; c += kThreads) {
        const int r = c / BK, kk = c % BK;
        const int64_t gk = k0 + kk;
        const bool ok = x_row[r] >= 0 && gk < k_end;
        cp_async4(xdst + r * XP + kk, ok ? p.x + x_row[r] * p.ldx + gk : p.x, ok);
      }
    }
  };

  float acc[TM], total[TM];
#pragma unroll
  for (int i = 0; i < TM; ++i) acc[i] = total[i] = 0.0f;
  const int64_t split_tiles = p.split_len / BK;  // tiles per split (serial bookkeeping)

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < ntiles) load_tile(s, s);
    cp_async_commit();
  }
  for (int t = 0; t < ntiles; ++t) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (t + kStages - 1 < ntiles) load_tile(t + kStages - 1, (t + kStages - 1) % kStages);
    cp_async_commit();

    const int slot = t % kStages;
    const unsigned char* wrow = ws + slot * BN * kRowPitch + n_local * kRowPitch;
    const float* xt = xs + slot * BM * XP + g * TM * XP;
    const int64_t k0 = k_begin + static_cast<int64_t>(t) * BK;
#pragma unroll
    for (int part = 0; part < kChunks; ++part) {
      float wf[VE];
      decode16<E>(*reinterpret_cast<const uint4*>(wrow + part * 16), wf);
      // Past the row's end the weights are zero-filled and have no scale to read.
      if (mat.scale != nullptr && n < p.N && k0 + part * VE < p.K) {
        const float sc = scale_at(p, mat.scale, n, k0 + part * VE);
#pragma unroll
        for (int e = 0; e < VE; ++e) wf[e] *= sc;
      }
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const float* xr = xt + i * XP + part * VE;
#pragma unroll
        for (int e = 0; e < VE; e += 4) {
          const float4 xv = *reinterpret_cast<const float4*>(xr + e);
          acc[i] = fmaf(wf[e], xv.x, acc[i]);
          acc[i] = fmaf(wf[e + 1], xv.y, acc[i]);
          acc[i] = fmaf(wf[e + 2], xv.z, acc[i]);
          acc[i] = fmaf(wf[e + 3], xv.w, acc[i]);
        }
      }
    }
    if constexpr (kSerial) {
      if ((t + 1) % split_tiles == 0 || t + 1 == ntiles) {
        const bool first = t + 1 <= split_tiles;
#pragma unroll
        for (int i = 0; i < TM; ++i) {
          total[i] = first ? acc[i] : total[i] + acc[i];
          acc[i] = 0.0f;
        }
      }
    }
  }
  cp_async_wait<0>();

  if (kSerial || p.splits == 1) {
    if (n >= p.N) return;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int64_t orow = o_row[g * TM + i];
      if (orow >= 0) p.out[orow * p.ldo + n] = kSerial ? total[i] : acc[i];
    }
    return;
  }
  // Split-parallel: publish this split's partials; the CTA that finishes a tile last adds the
  // tile's splits in split order (total = p0, total += p1, ...) and resets the tile's counter.
  if (n < p.N) {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int64_t orow = o_row[g * TM + i];
      if (orow >= 0) p.partial[(static_cast<int64_t>(split0) * p.M + orow) * p.N + n] = acc[i];
    }
  }
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  const int64_t tile = (static_cast<int64_t>(blockIdx.z) * m_tiles_y + m_tile) * gridDim.x + blockIdx.x;
  if (tid == 0) last = atomicAdd(&p.counters[tile], 1) == p.splits - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (tid == 0) p.counters[tile] = 0;
  if (n >= p.N) return;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int64_t orow = o_row[g * TM + i];
    if (orow < 0) continue;
    float t = __ldcg(p.partial + orow * p.N + n);
    for (int s = 1; s < p.splits; ++s) t = t + __ldcg(p.partial + (s * p.M + orow) * p.N + n);
    p.out[orow * p.ldo + n] = t;
  }
}

// Zeroed tile counters for the split reductions, kept for the life of the program (each
// reducing CTA leaves its counter at zero again).
int* tile_counters(size_t count) {
  static std::mutex m;
  static Buffer buf;
  std::lock_guard<std::mutex> lock(m);
  if (buf.size() < count * sizeof(int)) {
    const size_t want = std::max<size_t>(count, size_t(1) << 16) * sizeof(int);
    HIBANA_CUDA(cudaStreamSynchronize(stream()));  // the old buffer may still be in use
    buf = Buffer(want, Device::cuda);
    HIBANA_CUDA(cudaMemsetAsync(buf.data(), 0, want, stream()));
  }
  return static_cast<int*>(buf.data());
}

// The split length of a [N, K] weight: enough splits that a decode step fills the GPU, never
// shorter than 512 elements, a multiple of kSplitQuantum. Depends on the shape only.
int64_t split_length(int64_t N, int64_t K) {
  const int64_t n_tiles = (N + 127) / 128;
  const int64_t want = std::max<int64_t>(1, 264 / n_tiles);
  const int64_t most = std::max<int64_t>(1, K / 512);
  const int64_t splits = std::clamp<int64_t>(want, 1, most);
  const int64_t len = (K + splits - 1) / splits;
  return (len + kSplitQuantum - 1) / kSplitQuantum * kSplitQuantum;
}

struct Config {
  int tm, g;
  bool serial;
};
Config pick_config(int64_t rows) {
  if (rows <= 1) return {1, 1, false};
  if (rows <= 4) return {4, 1, false};
  if (rows <= 16) return {16, 1, false};
  if (rows <= 32) return {32, 1, false};
  return {16, 4, true};
}

template <Elt E, int TM, int G, bool kSerial, bool kGrouped>
void launch_config(const Params& p, int64_t max_rows, int groups) {
  constexpr int esize = EltInfo<E>::size, BK = kRowBytes / esize;
  constexpr int BN = kThreads / G, BM = TM * G;
  const size_t smem = stages_for(TM, kSerial) * (BN * kRowPitch + BM * (BK + 4) * sizeof(float));
  auto kernel = matmul_kernel<E, TM, G, kSerial, kGrouped>;
  static std::once_flag once;
  std::call_once(once, [&] {
    HIBANA_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  });
  const int64_t m_tiles = (max_rows + BM - 1) / BM;
  dim3 grid(static_cast<unsigned>((p.N + BN - 1) / BN),
            static_cast<unsigned>(m_tiles * (kSerial ? 1 : p.splits)),
            static_cast<unsigned>(groups));
  kernel<<<grid, kThreads, smem, stream()>>>(p);
  launched("matmul_kernel");
}

template <Elt E, bool kGrouped>
void launch_elt(const Params& p, int64_t max_rows, int groups) {
  const Config c = pick_config(max_rows);
  if (c.serial) return launch_config<E, 16, 4, true, kGrouped>(p, max_rows, groups);
  switch (c.tm) {
    case 1: return launch_config<E, 1, 1, false, kGrouped>(p, max_rows, groups);
    case 4: return launch_config<E, 4, 1, false, kGrouped>(p, max_rows, groups);
    case 16: return launch_config<E, 16, 1, false, kGrouped>(p, max_rows, groups);
    default: return launch_config<E, 32, 1, false, kGrouped>(p, max_rows, groups);
  }
}

// Runs one (plain or grouped) product; `max_rows` bounds the rows of any group. Adds the
// split reduction when the launch runs splits in parallel.
void run(Params p, Elt elt, bool grouped, int64_t max_rows, int groups) {
  if (p.M == 0 || p.N == 0) return;
  p.split_len = split_length(p.N, p.K);
  p.splits = static_cast<int>((p.K + p.split_len - 1) / p.split_len);
  const bool serial = pick_config(max_rows).serial;
  std::unique_ptr<Scratch> partial;
  if (!serial && p.splits > 1) {
    partial = std::make_unique<Scratch>(static_cast<size_t>(p.splits * p.M * p.N) * sizeof(float));
    p.partial = partial->as<float>();
    const Config c = pick_config(max_rows);
    const int64_t bn = kThreads / c.g, bm = static_cast<int64_t>(c.tm) * c.g;
    p.counters = tile_counters(static_cast<size_t>(((p.N + bn - 1) / bn) *
                                                   ((max_rows + bm - 1) / bm) * groups));
  }
  auto go = [&](auto tag) {
    constexpr Elt E = decltype(tag)::value;
    if (grouped) {
      launch_elt<E, true>(p, max_rows, groups);
    } else {
      launch_elt<E, false>(p, max_rows, groups);
    }
  };
  switch (elt) {
    case Elt::f32: go(std::integral_constant<Elt, Elt::f32>{}); break;
    case Elt::bf16: go(std::integral_constant<Elt, Elt::bf16>{}); break;
    case Elt::f16: go(std::integral_constant<Elt, Elt::f16>{}); break;
    case Elt::fp8: go(std::integral_constant<Elt, Elt::fp8>{}); break;
  }
}

// Fills the weight-description fields of p from w (shape, strides, scales, alignment).
void describe_weight(const Weight& w, Params& p) {
  const int esize = static_cast<int>(dtype_size(w.w.dtype));
  p.N = w.rows();
  p.K = w.cols();
  p.ldw = w.w.stride[0];
  check(w.w.stride[1] == 1, ErrorKind::internal, "matmul: weight rows must be contiguous");
  p.vec_w = reinterpret_cast<uintptr_t>(w.w.data) % 16 == 0 && (p.ldw * esize) % 16 == 0 &&
            (p.K * esize) % 16 == 0;
  p.scale_kind = 0;
  if (!w.scale.empty()) {
    check(w.scale.dtype == DType::f32 || w.scale.dtype == DType::bf16, ErrorKind::unsupported,
          std::string("weight scales of dtype ") + dtype_name(w.scale.dtype));
    const int ve = 16 / esize;
    check(w.block_cols % ve == 0 && w.block_rows > 0, ErrorKind::unsupported,
          "CUDA matmul: scale blocks must span whole 16-byte groups of a row");
    p.scale_kind = w.scale.dtype == DType::f32 ? 1 : 2;
    p.scale_ld = w.scale.stride[w.scale.ndim - 2];
    p.block_rows = w.block_rows;
    p.block_cols = w.block_cols;
  }
}

void describe_x(const Tensor& x, Params& p) {
  check(x.stride[1] == 1, ErrorKind::internal, "matmul: x rows must be contiguous");
  p.x = x.ptr<float>();
  p.ldx = x.stride[0];
  p.vec_x = reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && p.ldx % 4 == 0;
}

// Device copies of the pointer tables of each expert set, built on first use.
struct ExpertTables {
  std::vector<const void*> key;  // every expert matrix pointer, to detect a reused address
  Buffer gate, up, down;         // MatPtr[E] each
};
std::mutex g_tables_mutex;
std::unordered_map<const void*, std::unique_ptr<ExpertTables>> g_tables;

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
  std::vector<const void*> key;
  for (const std::vector<Weight>* list : {&ex.gate, &ex.up, &ex.down}) {
    for (const Weight& w : *list) {
      key.push_back(w.w.data);
      key.push_back(w.scale.data);
    }
  }
  std::lock_guard<std::mutex> lock(g_tables_mutex);
  auto& slot = g_tables[ex.gate[0].w.data];
  if (!slot || slot->key != key) {
    slot = std::make_unique<ExpertTables>();
    slot->key = std::move(key);
    slot->gate = upload_table(ex.gate);
    slot->up = upload_table(ex.up);
    slot->down = upload_table(ex.down);
  }
  return *slot;
}

// Groups the T*k (token, slot) pairs by expert: offsets [E + 1] and rows (pair indices).
__global__ void group_by_expert_kernel(const int32_t* ids, int64_t pairs, int E, int32_t* offsets,
                                       int32_t* rows) {
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
    int32_t run = 0;
    for (int e = 0; e < E; ++e) {
      offsets[e] = run;
      cursor[e] = run;
      run += counts[e];
    }
    offsets[E] = run;
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
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * H) return;
  const int64_t t = i / H, c = i % H;
  float acc = 0.0f;
  for (int j = 0; j < k; ++j) acc = fmaf(weights[t * k + j], y[(t * k + j) * H + c], acc);
  out[t * ldo + c] = acc;
}

}  // namespace

void matmul(const Tensor& x, const Weight& w, Tensor out) {
  const int64_t m = x.shape[0];
  check(w.cols() == x.shape[1], ErrorKind::internal,
        "matmul: x is " + x.shape_string() + " but the weight is " + w.w.shape_string());
  check(out.shape[0] == m && out.shape[1] == w.rows() && out.stride[1] == 1, ErrorKind::internal,
        "matmul: output is " + out.shape_string());
  Params p{};
  describe_weight(w, p);
  describe_x(x, p);
  p.out = out.ptr<float>();
  p.ldo = out.stride[0];
  p.M = m;
  p.single = MatPtr{w.w.data, w.scale.empty() ? nullptr : w.scale.data};
  run(p, elt_of(w.w.dtype), false, m, 1);
}

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

  Scratch offsets((E + 1) * sizeof(int32_t)), rows(pairs * sizeof(int32_t));
  group_by_expert_kernel<<<1, 1024, 2 * E * sizeof(int32_t), stream()>>>(
      ids.ptr<int32_t>(), pairs, E, offsets.as<int32_t>(), rows.as<int32_t>());
  launched("group_by_expert_kernel");

  Scratch gate(pairs * I * sizeof(float)), up(pairs * I * sizeof(float)),
      y(pairs * H * sizeof(float));
  Tensor gt(gate.as<float>(), DType::f32, {pairs, I}, Device::cuda);
  Tensor ut(up.as<float>(), DType::f32, {pairs, I}, Device::cuda);
  auto grouped = [&](const Weight& w0, const Buffer& table, const Tensor& in, int x_div, float* dst) {
    Params p{};
    describe_weight(w0, p);
    describe_x(in, p);
    p.out = dst;
    p.ldo = p.N;
    p.M = pairs;
    p.mats = static_cast<const MatPtr*>(table.data());
    p.group_offset = offsets.as<int32_t>();
    p.group_rows = rows.as<int32_t>();
    p.x_div = x_div;
    // An expert serves each token at most once, so no group has more than T rows.
    run(p, elt_of(w0.w.dtype), true, T, E);
  };
  grouped(experts.gate[0], tab.gate, x, static_cast<int>(k), gate.as<float>());
  grouped(experts.up[0], tab.up, x, static_cast<int>(k), up.as<float>());
  silu_mul(gt, ut, gt);
  grouped(experts.down[0], tab.down, gt, 1, y.as<float>());
  moe_combine_kernel<<<blocks_for(T * H, 256), 256, 0, stream()>>>(
      y.as<float>(), weights.ptr<float>(), T, static_cast<int>(k), H, out.ptr<float>(),
      ld(out));
  launched("moe_combine_kernel");
}

}  // namespace hibana::cuda
