// Logits summaries (core/logits_summary.h) on the GPU, in one launch whose CTAs each take a
// chunk of kChunk entries of a row (grid chunks x rows: how a row is cut depends on the
// vocabulary alone, never on the batch). A CTA holds its chunk's keys in shared memory and finds
// there the chunk's maximum, its sums of exp(l - m) and exp((l - m) / T) relative to its own
// maximum m (float exponentials summed in double) and its n largest entries, sorted, by a radix
// select; the row's last CTA to finish (mm::last_to_finish) merges the chunks: the row's
// maximum, the sums rescaled to it in chunk order (by exp(m - max) in double) and the n largest
// of the chunks' candidates by a second select. Only a few hundred bytes a row cross to the
// host. (One CTA a row read the whole row, 608 KB at 152k entries, once for each pass: 17 us
// at batch 1 for a greedy summary on an H100.)
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/matmul_impl.h"
#include "backend/cuda/ops.h"
#include "core/logits_summary.h"

namespace hibana::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 8192;  // entries a CTA takes
constexpr int kPer = kChunk / kThreads;
constexpr int kMaxK = 256;
constexpr int kMaxChunks = 256;  // (a vocabulary of up to 2M entries)
static_assert(kMaxK <= kThreads && kMaxChunks <= kChunk / 4, "one thread an entry; sums in key[]");

// Unsigned keys in the order of the floats (-0 as +0, so that equal floats have equal keys),
// never 0, which the selects below take for "no entry" (the one float it would be, a NaN with
// every bit set, takes key 1 with the next NaN).
__device__ __forceinline__ uint32_t key_of(float x) {
  if (x == 0.0f) x = 0.0f;
  const uint32_t u = __float_as_uint(x);
  const uint32_t k = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return k | static_cast<uint32_t>(k == 0u);
}

// What a chunk leaves for the merge: its maximum and sums, and beside these its candidates,
// its min(n, length) largest entries, sorted (SummaryArgs::ckey, cid).
struct ChunkHead {
  double a, b;     // sums of exp(l - m) and exp((l - m) / T) over the chunk (0: not asked)
  float m;         // its maximum (the entry at id)
  uint32_t key;    // key_of(m)
  int32_t id;      // the lowest token holding it
};

// Rows whose temperatures travel in the launch's arguments (more: a copy to the GPU first, a
// node between the lm_head and this kernel that cost 6.5 us of idle GPU a step at batch 1).
constexpr int kInlineRows = 64;

struct SummaryArgs {
  const float* logits;
  int64_t ld, V;
  const float* temperature;  // [rows], or null: temps
  float temps[kInlineRows];
  int k, chunks;
  ChunkHead* heads;  // [rows, chunks]
  uint32_t* ckey;    // [rows, chunks, n] the candidates' keys (0: an empty slot) and tokens
  int32_t* cid;
  int* counters;  // [rows], zero
  int32_t* out;
};

struct Shared {
  uint32_t key[kChunk];  // the chunk's keys; in the merge, the chunks' rescaled sums
  uint32_t hist[2048];
  int sel[kMaxK];
  uint32_t skey[kMaxK];
  int32_t sid[kMaxK];
  double sums[kWarps];
  uint32_t wkey[kWarps], warp_count[kWarps];
  int32_t wid[kWarps];
  uint32_t bin, above;
  int taken;
};

// Block-wide sum in a fixed order (warp shuffles, then the warps' sums in warp order).
__device__ double block_sum(double v, double* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  __syncthreads();
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < kWarps; ++w) total += scratch[w];
  return total;
}

// The largest key over the block, the lowest id among equals (every thread gets it).
__device__ void block_best(uint32_t& bk, int& bi, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) {
    const uint32_t ok = __shfl_down_sync(0xffffffffu, bk, o);
    const int oi = __shfl_down_sync(0xffffffffu, bi, o);
    if (ok > bk || (ok == bk && oi < bi)) {
      bk = ok;
      bi = oi;
    }
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) {
    sh.wkey[threadIdx.x / 32] = bk;
    sh.wid[threadIdx.x / 32] = bi;
  }
  __syncthreads();
  bk = sh.wkey[0];
  bi = sh.wid[0];
  for (int w = 1; w < kWarps; ++w) {
    if (sh.wkey[w] > bk || (sh.wkey[w] == bk && sh.wid[w] < bi)) {
      bk = sh.wkey[w];
      bi = sh.wid[w];
    }
  }
}

// A chunk's keys in shared memory.
struct SharedKeys {
  const uint32_t* key;
  int n;
  __device__ int size() const { return n; }
  __device__ uint32_t operator()(int i) const { return key[i]; }
};
// The merge's candidates in global memory, written by the row's other CTAs (key 0: an empty
// slot).
struct CandidateKeys {
  const uint32_t* key;
  int n;
  __device__ int size() const { return n; }
  __device__ uint32_t operator()(int i) const { return __ldcg(key + i); }
};

// The n-th largest key of `keys` (n at most their count of nonzero keys), 11 + 11 + 10 bits at a
// time, and how many of the n are equal to it (`need`).
template <class Keys>
__device__ void radix_select(const Keys& keys, int n, Shared& sh, uint32_t& threshold,
                             int& need) {
  const int t = threadIdx.x, lane = t % 32;
  uint32_t prefix = 0, mask = 0;
  need = n;
  const int shifts[3] = {21, 10, 0}, bits[3] = {11, 11, 10};
  for (int pass = 0; pass < 3; ++pass) {
    const int nb = 1 << bits[pass], shift = shifts[pass];
    for (int i = t; i < 2048; i += kThreads) sh.hist[i] = 0;
    __syncthreads();
#pragma unroll 4
    for (int i = t; i < keys.size(); i += kThreads) {
      const uint32_t kv = keys(i);
      if (kv != 0u && (kv & mask) == prefix) atomicAdd(&sh.hist[(kv >> shift) & (nb - 1)], 1u);
    }
    __syncthreads();
    if (t < 32) {
      // Lane j sums its run of bins from the top; the lane where the running count reaches
      // `need` walks its run.
      const int per = nb / 32;
      const int hi = nb - 1 - lane * per;  // this lane's bins: hi down to hi - per + 1
      uint32_t mine = 0;
      for (int i = 0; i < per; ++i) mine += sh.hist[hi - i];
      uint32_t before = mine;  // inclusive scan over lanes (from the top)
      for (int d = 1; d < 32; d <<= 1) {
        const uint32_t x = __shfl_up_sync(0xffffffffu, before, d);
        if (lane >= d) before += x;
      }
      before -= mine;  // exclusive
      if (before < static_cast<uint32_t>(need) && before + mine >= static_cast<uint32_t>(need)) {
        uint32_t acc = before;
        for (int i = 0; i < per; ++i) {
          const uint32_t c = sh.hist[hi - i];
          if (acc + c >= static_cast<uint32_t>(need)) {
            sh.bin = static_cast<uint32_t>(hi - i);
            sh.above = acc;
            break;
          }
          acc += c;
        }
      }
    }
    __syncthreads();
    prefix |= sh.bin << shift;
    mask |= static_cast<uint32_t>(nb - 1) << shift;
    need -= static_cast<int>(sh.above);
    __syncthreads();
  }
  threshold = prefix;
}

// The n entries at or above the threshold into sh.sel (their indices): every larger key (n -
// need of them, in any order) and the first `need` equal ones in index order. Warp w walks a
// contiguous region of the indices 32 consecutive ones at a time, so among equal keys index
// order is warp order, then step order, then lane order: a first pass counts each region's
// equal keys, a scan over the warps' totals gives each region its first rank, and a second pass
// writes — equal keys ranked by ballots, larger ones into slots taken by atomic increments.
template <class Keys>
__device__ void gather(const Keys& keys, uint32_t threshold, int n, int need, Shared& sh) {
  const int t = threadIdx.x, lane = t % 32, warp = t / 32, size = keys.size();
  const int region = (size + kThreads - 1) / kThreads * 32;  // a multiple of 32
  const int lo = min(warp * region, size), hi = min(lo + region, size);
  uint32_t eq_here = 0;
  for (int i = lo + lane; i < hi; i += 32) eq_here += keys(i) == threshold;
  for (int o = 16; o > 0; o >>= 1) eq_here += __shfl_xor_sync(0xffffffffu, eq_here, o);
  if (lane == 0) sh.warp_count[warp] = eq_here;
  if (t == 0) sh.taken = 0;
  __syncthreads();
  uint32_t rank = 0;  // equal keys before this region
  for (int w = 0; w < warp; ++w) rank += sh.warp_count[w];
  const uint32_t below = (1u << lane) - 1u;
  const int greater = n - need;
  for (int base = lo; base < hi; base += 32) {  // the same trips on every lane
    const int i = base + lane;
    const bool in = i < hi;
    const uint32_t kv = in ? keys(i) : 0u;
    const bool eq = in && kv == threshold;
    const uint32_t ballot = __ballot_sync(0xffffffffu, eq);
    if (in && kv > threshold) {
      sh.sel[atomicAdd(&sh.taken, 1)] = i;
    } else if (eq) {
      const uint32_t r = rank + __popc(ballot & below);
      if (r < static_cast<uint32_t>(need)) sh.sel[greater + r] = i;
    }
    rank += __popc(ballot);
  }
  __syncthreads();
}

// The n largest entries of `keys` (n at most their nonzero count), sorted: thread t < n gets
// its entry's key and token in sh.skey[t], sh.sid[t], and its place; ids(i) is entry i's token
// (ties to the lower).
template <class Keys, class Ids>
__device__ int top_n(const Keys& keys, const Ids& ids, int n, Shared& sh) {
  uint32_t threshold;
  int need;
  radix_select(keys, n, sh, threshold, need);
  gather(keys, threshold, n, need, sh);
  const int t = threadIdx.x;
  if (t < n) {
    sh.skey[t] = keys(sh.sel[t]);
    sh.sid[t] = ids(sh.sel[t]);
  }
  __syncthreads();
  int place = 0;
  if (t < n) {
    const uint32_t kv = sh.skey[t];
    const int32_t id = sh.sid[t];
    for (int j = 0; j < n; ++j) {
      place += sh.skey[j] > kv || (sh.skey[j] == kv && sh.sid[j] < id);
    }
  }
  return place;
}

struct ChunkIds {
  int64_t lo;
  __device__ int32_t operator()(int i) const { return static_cast<int32_t>(lo + i); }
};
struct CandidateIds {
  const int32_t* id;
  __device__ int32_t operator()(int i) const { return __ldcg(id + i); }
};

// The row's last CTA: the chunks' heads and candidates into the row's summary.
__device__ void merge_chunks(const SummaryArgs& s, int64_t r, int n, float temp, Shared& sh) {
  const int t = threadIdx.x, C = s.chunks;
  const ChunkHead* heads = s.heads + r * C;
  uint32_t bk = 0;
  int bi = INT_MAX;
  for (int c = t; c < C; c += kThreads) {
    const uint32_t kv = __ldcg(&heads[c].key);
    const int id = __ldcg(&heads[c].id);
    if (kv > bk || (kv == bk && id < bi)) {
      bk = kv;
      bi = id;
    }
  }
  block_best(bk, bi, sh);
  if (bi == INT_MAX) bi = 0;  // (every key 0)
  const float mx = __ldcg(&heads[bi / kChunk].m);
  // The sums rescaled to the row's maximum, added in chunk order (a chunk of -inf adds 0; a
  // row of -inf alone gives NaN, as exp(-inf - -inf) does on the host).
  double* s1 = reinterpret_cast<double*>(sh.key);
  double* st = s1 + kMaxChunks;
  const double inv_t = temp > 0.0f ? 1.0 / static_cast<double>(temp) : 0.0;
  for (int c = t; c < C && temp >= 0.0f; c += kThreads) {
    const double a = __ldcg(&heads[c].a), b = __ldcg(&heads[c].b);
    const double d = static_cast<double>(__ldcg(&heads[c].m)) - mx;
    s1[c] = a == 0.0 ? 0.0 : a * exp(d);
    st[c] = b == 0.0 ? 0.0 : b * exp(d * inv_t);
  }
  __syncthreads();
  int32_t* o = s.out + r * summary_words(s.k);
  if (t == 0) {
    double sum1 = 0.0, sumt = 0.0;
    for (int c = 0; c < C && temp >= 0.0f; ++c) {
      sum1 += s1[c];
      if (temp > 0.0f) sumt += st[c];
    }
    if (temp >= 0.0f && mx == -INFINITY) sum1 = sumt = NAN;
    if (temp == 0.0f) sumt = 0.0;
    const long long w1 = __double_as_longlong(sum1), wt = __double_as_longlong(sumt);
    o[0] = static_cast<int32_t>(w1 & 0xffffffffll);
    o[1] = static_cast<int32_t>(w1 >> 32);
    o[2] = static_cast<int32_t>(wt & 0xffffffffll);
    o[3] = static_cast<int32_t>(wt >> 32);
    o[4] = __float_as_int(mx);
    o[5] = n;
    o[6] = o[7] = 0;
  }
  if (n == 1) {
    if (t == 0) {
      o[8] = __float_as_int(mx);
      o[8 + s.k] = bi;
    }
    return;
  }
  const int64_t base = r * C * n;
  const int place = top_n(CandidateKeys{s.ckey + base, C * n}, CandidateIds{s.cid + base}, n, sh);
  if (t < n) {
    o[8 + place] = __float_as_int(s.logits[r * s.ld + sh.sid[t]]);
    o[8 + s.k + place] = sh.sid[t];
  }
}

__global__ void __launch_bounds__(kThreads) summary_kernel(SummaryArgs s) {
  __shared__ Shared sh;
  pdl_start();
  const int c = blockIdx.x, t = threadIdx.x;
  const int64_t r = blockIdx.y, lo = static_cast<int64_t>(c) * kChunk;
  const float* l = s.logits + r * s.ld;
  const int len = static_cast<int>(s.V - lo < kChunk ? s.V - lo : kChunk);
  const int n = static_cast<int>(s.V < s.k ? s.V : s.k);
  const float temp = s.temperature ? s.temperature[r] : s.temps[r];

  // The chunk's entries (every load issued before any is used), their keys into shared memory,
  // and the chunk's largest entry, the lowest token among equals.
  float x[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = t + j * kThreads;
    x[j] = i < len ? __ldg(l + lo + i) : 0.0f;
  }
  uint32_t bk = 0;
  int bi = INT_MAX;
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = t + j * kThreads;
    if (i < len) {
      const uint32_t kv = key_of(x[j]);
      sh.key[i] = kv;
      if (kv > bk) {
        bk = kv;
        bi = i;
      }
    }
  }
  block_best(bk, bi, sh);
  if (bi == INT_MAX) bi = 0;  // (every key 0)
  const float m = l[lo + bi];

  // Its sums relative to its own maximum (a chunk of -inf adds nothing).
  double a = 0.0, b = 0.0;
  if (temp >= 0.0f) {
    const float inv_t = temp > 0.0f ? 1.0f / temp : 0.0f;
    if (m != -INFINITY) {
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        if (t + j * kThreads < len) {
          const float d = x[j] - m;
          a += expf(d);
          if (temp > 0.0f) b += expf(d * inv_t);
        }
      }
    }
    a = block_sum(a, sh.sums);
    if (temp > 0.0f) b = block_sum(b, sh.sums);
  }

  // Its min(n, len) largest entries, sorted, as candidates, key 0 in the slots past them (n 1:
  // the maximum, in the head).
  const int nc = min(n, len);
  if (n > 1) {
    const int place = top_n(SharedKeys{sh.key, len}, ChunkIds{lo}, nc, sh);
    const int64_t slots = (r * s.chunks + c) * n;
    if (t < nc) {
      s.ckey[slots + place] = sh.skey[t];
      s.cid[slots + place] = sh.sid[t];
    } else if (t < n) {
      s.ckey[slots + t] = 0u;
    }
  }
  if (t == 0) s.heads[r * s.chunks + c] = ChunkHead{a, b, m, bk, static_cast<int32_t>(lo + bi)};
  if (!mm::last_to_finish(s.counters + r, s.chunks)) return;
  merge_chunks(s, r, n, temp, sh);
}

// The penalised entries of row blockIdx.x (the row itself copied before): penalise_rows'
// arithmetic, each operation rounded on its own (no fma), so the bits are the host's.
__global__ void __launch_bounds__(256)
    penalise_kernel(const float* x, int64_t ldx, float* out, int64_t ldo, const int64_t* offset,
                    const int32_t* token, const float* subtract, const float* repetition) {
  pdl_start();
  const int64_t r = blockIdx.x;
  const float rep = repetition[r];
  for (int64_t i = offset[r] + threadIdx.x; i < offset[r + 1]; i += blockDim.x) {
    const int32_t t = token[i];
    const float l = x[r * ldx + t];
    const float v = l > 0.0f ? __fdiv_rn(l, rep) : __fmul_rn(l, rep);
    out[r * ldo + t] = __fsub_rn(v, subtract[i]);
  }
}

}  // namespace

void penalise_rows(const Tensor& logits, const LogitsPenalties& p, Tensor out) {
  check_penalties(logits, p, out);
  check(logits.data != out.data, ErrorKind::internal, "penalise_rows: in place on the GPU");
  const int64_t R = logits.shape[0], V = logits.shape[1];
  const size_t n = p.token.size();
  if (R == 0) return;
  HIBANA_CUDA(cudaMemcpy2DAsync(out.data, ld(out) * sizeof(float), logits.data,
                                ld(logits) * sizeof(float), V * sizeof(float), R,
                                cudaMemcpyDeviceToDevice, stream()));
  if (n == 0) return;
  // One upload: the offsets, the tokens, the subtractions, the repetition penalties.
  const size_t off_b = (R + 1) * sizeof(int64_t), tok_b = n * sizeof(int32_t),
               sub_b = n * sizeof(float), rep_b = R * sizeof(float);
  std::vector<char> host(off_b + tok_b + sub_b + rep_b);
  std::memcpy(host.data(), p.offset.data(), off_b);
  std::memcpy(host.data() + off_b, p.token.data(), tok_b);
  std::memcpy(host.data() + off_b + tok_b, p.subtract.data(), sub_b);
  std::memcpy(host.data() + off_b + tok_b + sub_b, p.repetition.data(), rep_b);
  Scratch dev(host.size());
  char* d = dev.as<char>();
  HIBANA_CUDA(cudaMemcpyAsync(d, host.data(), host.size(), cudaMemcpyHostToDevice, stream()));
  launch_pdl(penalise_kernel, dim3(static_cast<unsigned>(R)), dim3(256), 0, logits.ptr<float>(),
             ld(logits), out.ptr<float>(), ld(out), reinterpret_cast<const int64_t*>(d),
             reinterpret_cast<const int32_t*>(d + off_b),
             reinterpret_cast<const float*>(d + off_b + tok_b),
             reinterpret_cast<const float*>(d + off_b + tok_b + sub_b));
  launched("penalise_kernel");
}

void logits_summary(const Tensor& logits, const std::vector<float>& temperature, int64_t k,
                    Tensor out) {
  const int64_t R = logits.shape[0], V = logits.shape[1];
  check(logits.dtype == DType::f32 && out.dtype == DType::i32 && out.is_contiguous() &&
            out.shape[0] == R && out.shape[1] == summary_words(k) &&
            static_cast<int64_t>(temperature.size()) == R && k >= 1 && k <= kMaxK && V >= 1,
        ErrorKind::internal, "logits_summary: shapes");
  check(V <= static_cast<int64_t>(kMaxChunks) * kChunk && R <= 65535, ErrorKind::unsupported,
        "CUDA logits summaries: at most 2M entries a row and 65535 rows");
  if (R == 0) return;
  const int64_t chunks = (V + kChunk - 1) / kChunk, n = std::min(k, V);
  const size_t heads_b = static_cast<size_t>(R * chunks) * sizeof(ChunkHead);
  const size_t cand_b = static_cast<size_t>(R * chunks * n) * sizeof(uint32_t);
  Scratch scratch(heads_b + 2 * cand_b);
  std::unique_ptr<Scratch> temps;
  SummaryArgs s{};
  s.logits = logits.ptr<float>();
  s.ld = ld(logits);
  s.V = V;
  if (R <= kInlineRows) {
    std::copy(temperature.begin(), temperature.end(), s.temps);
  } else {
    temps = std::make_unique<Scratch>(static_cast<size_t>(R) * sizeof(float));
    HIBANA_CUDA(cudaMemcpyAsync(temps->as<float>(), temperature.data(), R * sizeof(float),
                                cudaMemcpyHostToDevice, stream()));
    s.temperature = temps->as<float>();
  }
  s.k = static_cast<int>(k);
  s.chunks = static_cast<int>(chunks);
  s.heads = scratch.as<ChunkHead>();
  s.ckey = reinterpret_cast<uint32_t*>(scratch.as<char>() + heads_b);
  s.cid = reinterpret_cast<int32_t*>(scratch.as<char>() + heads_b + cand_b);
  s.counters = mm::finish_counters(static_cast<size_t>(R));
  s.out = out.ptr<int32_t>();
  launch_pdl(summary_kernel, dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(R)),
             dim3(kThreads), 0, s);
  launched("summary_kernel");
}

}  // namespace hibana::cuda
