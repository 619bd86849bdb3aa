// Logits summaries (core/logits_summary.h) on the GPU: one CTA per row finds the row's
// maximum, the sums in double, and its k largest entries by a radix select on order-preserving
// keys, so that only a few hundred bytes per row cross to the host. The sums come from float
// exponentials (see below).
#include <cfloat>
#include <cstring>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/ops.h"
#include "core/logits_summary.h"

namespace hibana::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxK = 256;
static_assert(kWarps == 32, "the block scan takes one warp of warp totals");

// Unsigned keys in the order of the floats (-0 as +0, so that equal floats have equal keys).
__device__ __forceinline__ uint32_t key_of(float x) {
  if (x == 0.0f) x = 0.0f;
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Block-wide sum in a fixed order (warp shuffles, then warp 0 over the warps' sums).
__device__ double block_sum(double v, double* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double total = 0.0;
  if (warp == 0) {
    total = lane < kWarps ? scratch[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) total += __shfl_down_sync(0xffffffffu, total, o);
    if (lane == 0) scratch[0] = total;
  }
  __syncthreads();
  return scratch[0];
}

struct Shared {
  uint32_t hist[2048];
  double sums[kWarps];
  uint32_t best_key[kWarps];
  int32_t best_id[kWarps];
  uint32_t warp_count[kWarps];
  float value[kMaxK];
  int32_t id[kMaxK];
  uint32_t bin, above;  // the select's digit and the count above it
  int taken_gt;
};

__global__ void __launch_bounds__(kThreads)
    summary_kernel(const float* logits, int64_t ld, int64_t V, const float* temperature, int k,
                   int32_t* out) {
  pdl_start();
  __shared__ Shared sh;
  const int64_t r = blockIdx.x;
  const float* l = logits + r * ld;
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int n = static_cast<int>(V < k ? V : k);

  // The maximum (the lowest index among equals).
  uint32_t bk = 0;
  int32_t bi = INT32_MAX;
#pragma unroll 8
  for (int64_t v = t; v < V; v += kThreads) {
    const uint32_t kv = key_of(__ldg(l + v));
    if (kv > bk) {
      bk = kv;
      bi = static_cast<int32_t>(v);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const uint32_t ok = __shfl_down_sync(0xffffffffu, bk, o);
    const int32_t oi = __shfl_down_sync(0xffffffffu, bi, o);
    if (ok > bk || (ok == bk && oi < bi)) {
      bk = ok;
      bi = oi;
    }
  }
  if (lane == 0) {
    sh.best_key[warp] = bk;
    sh.best_id[warp] = bi;
  }
  __syncthreads();
  if (t == 0) {
    for (int w = 1; w < kWarps; ++w) {
      if (sh.best_key[w] > sh.best_key[0] ||
          (sh.best_key[w] == sh.best_key[0] && sh.best_id[w] < sh.best_id[0])) {
        sh.best_key[0] = sh.best_key[w];
        sh.best_id[0] = sh.best_id[w];
      }
    }
  }
  __syncthreads();
  const int32_t arg = sh.best_id[0];
  const float mx = l[arg];

  const float temp = temperature[r];
  double sum1 = 0.0, sumt = 0.0;
  if (temp >= 0.0f) {
    // Float exponentials (a double one per entry would cost a single CTA ~250 us on a 152k
    // vocabulary), summed in double: relative error ~1e-7 against summarise_row.
    const float inv_t = temp > 0.0f ? 1.0f / temp : 0.0f;
    double a = 0.0, b = 0.0;
    for (int64_t v = t; v < V; v += kThreads) {
      const float d = __ldg(l + v) - mx;
      a += expf(d);
      if (temp > 0.0f) b += expf(d * inv_t);
    }
    sum1 = block_sum(a, sh.sums);
    if (temp > 0.0f) sumt = block_sum(b, sh.sums);
  }

  int32_t* o = out + r * summary_words(k);
  if (n == 1) {
    if (t == 0) {
      sh.value[0] = mx;
      sh.id[0] = arg;
    }
  } else {
    // The n-th largest key, 11 + 11 + 10 bits at a time: `prefix` holds the digits found so
    // far, `need` how many of the n are still to come from keys that start with it.
    uint32_t prefix = 0, mask = 0;
    int need = n;
    const int shifts[3] = {21, 10, 0}, bits[3] = {11, 11, 10};
    for (int pass = 0; pass < 3; ++pass) {
      const int nb = 1 << bits[pass], shift = shifts[pass];
      for (int i = t; i < 2048; i += kThreads) sh.hist[i] = 0;
      __syncthreads();
      // Read-only global loads (__ldg) cannot alias the shared histogram, so they need not
      // wait for the atomics before them: several iterations' loads are in flight.
#pragma unroll 4
      for (int64_t v = t; v < V; v += kThreads) {
        const uint32_t kv = key_of(__ldg(l + v));
        if ((kv & mask) == prefix) atomicAdd(&sh.hist[(kv >> shift) & (nb - 1)], 1u);
      }
      __syncthreads();
      if (warp == 0) {
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
    // prefix is the n-th largest key: take every larger key (fewer than n) and the first
    // `need` equal ones in token order. Warp w owns a contiguous chunk of the row and walks it
    // 32 consecutive entries at a time (coalesced), so token order among the equal keys is
    // warp order, then step order, then lane order: a first pass counts each chunk's equal
    // keys, a scan over the 32 warp totals gives every chunk its first rank, and a second
    // pass writes — the equal keys ranked by ballots, the larger ones into slots taken by
    // atomic increments (their order does not matter: the entries are placed by value and
    // id below). No barrier in either loop (one barrier per 1024 entries made this ~150
    // rounds of four barriers per row).
    const uint32_t threshold = prefix;
    const int greater = n - need;
    const int64_t chunk = (V + kWarps * 32 - 1) / (kWarps * 32) * 32;  // a multiple of 32
    const int64_t lo = warp * chunk < V ? warp * chunk : V, hi = lo + chunk < V ? lo + chunk : V;
    uint32_t eq_here = 0;
#pragma unroll 8
    for (int64_t v = lo + lane; v < hi; v += 32) eq_here += key_of(__ldg(l + v)) == threshold;
    for (int o = 16; o > 0; o >>= 1) eq_here += __shfl_xor_sync(0xffffffffu, eq_here, o);
    if (lane == 0) sh.warp_count[warp] = eq_here;
    if (t == 0) sh.taken_gt = 0;
    __syncthreads();
    if (warp == 0) {  // exclusive scan of the warps' counts, in warp order
      const uint32_t w = sh.warp_count[lane];
      uint32_t wi = w;
      for (int d = 1; d < 32; d <<= 1) {
        const uint32_t x = __shfl_up_sync(0xffffffffu, wi, d);
        if (lane >= d) wi += x;
      }
      sh.warp_count[lane] = wi - w;
    }
    __syncthreads();
    uint32_t rank = sh.warp_count[warp];  // equal keys before this step of this chunk
    const uint32_t below = (1u << lane) - 1u;
    constexpr int kSteps = 8;  // steps loaded before any is used (the writes below are to
                               // shared memory, which a generic load could alias)
    for (int64_t base = lo; base < hi; base += 32 * kSteps) {  // the same trips on every lane
      float x[kSteps];
#pragma unroll
      for (int q = 0; q < kSteps; ++q) {
        const int64_t v = base + 32 * q + lane;
        x[q] = v < hi ? __ldg(l + v) : 0.0f;
      }
#pragma unroll
      for (int q = 0; q < kSteps; ++q) {
        const int64_t v = base + 32 * q + lane;
        const uint32_t kv = key_of(x[q]);
        const bool in = v < hi, eq = in && kv == threshold;
        const uint32_t ballot = __ballot_sync(0xffffffffu, eq);
        if (in && kv > threshold) {
          const int at = atomicAdd(&sh.taken_gt, 1);
          sh.value[at] = x[q];
          sh.id[at] = static_cast<int32_t>(v);
        } else if (eq) {
          const uint32_t r = rank + __popc(ballot & below);
          if (r < static_cast<uint32_t>(need)) {
            sh.value[greater + r] = x[q];
            sh.id[greater + r] = static_cast<int32_t>(v);
          }
        }
        rank += __popc(ballot);
      }
    }
  }
  __syncthreads();
  // Each entry's place: how many entries come before it (larger value, or equal and lower id).
  if (t < n) {
    const uint32_t kv = key_of(sh.value[t]);
    const int32_t id = sh.id[t];
    int place = 0;
    for (int j = 0; j < n; ++j) {
      const uint32_t kj = key_of(sh.value[j]);
      place += kj > kv || (kj == kv && sh.id[j] < id);
    }
    o[8 + place] = __float_as_int(sh.value[t]);
    o[8 + k + place] = id;
  }
  if (t == 0) {
    const long long s1 = __double_as_longlong(sum1), st = __double_as_longlong(sumt);
    o[0] = static_cast<int32_t>(s1 & 0xffffffffll);
    o[1] = static_cast<int32_t>(s1 >> 32);
    o[2] = static_cast<int32_t>(st & 0xffffffffll);
    o[3] = static_cast<int32_t>(st >> 32);
    o[4] = __float_as_int(mx);
    o[5] = n;
    o[6] = o[7] = 0;
  }
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
  if (R == 0) return;
  Scratch temps(static_cast<size_t>(R) * sizeof(float));
  HIBANA_CUDA(cudaMemcpyAsync(temps.as<float>(), temperature.data(), R * sizeof(float),
                              cudaMemcpyHostToDevice, stream()));
  launch_pdl(summary_kernel, dim3(static_cast<unsigned>(R)), dim3(kThreads), 0, logits.ptr<float>(),
             ld(logits), V, temps.as<float>(), static_cast<int>(k), out.ptr<int32_t>());
  launched("summary_kernel");
}

}  // namespace hibana::cuda
