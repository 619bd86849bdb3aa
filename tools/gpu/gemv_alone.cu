// The decode matmul kernel (src/backend/cuda/matmul_gemv.cu, with gemv_kernel.cuh, included
// whole) timed alone, outside hibana, beside tools/gpu/weight_stream.cu's "rows" kernel over
// the same buffers with the same timing: how much of the gap between the decode matmul and a
// bare read of its weights is the kernel's own. The backend's host pieces it calls are stubbed
// below; one split per product (split_len = K), weights of random bits, activations of zeros.
// DTYPE=fp8 runs fp8 weights with 128 x 128 block scales (all 1) on the 80B's shapes (bf16
// and the 8B's by default). EXPERTS=1: the 80B's expert gate/up instead (experts_main below).
//
// A measuring tool, built with the project (target gemv_alone, where nvcc is found) only so
// that a change to the decode matmul that breaks it (a host piece it does not stub) shows in
// CI; tools/gpu/gemv_variants.sh builds it over edited copies of the kernel, or by hand:
//   nvcc -O3 -std=c++17 -arch=sm_90 --expt-relaxed-constexpr -Isrc -DNDEBUG \
//     -o gemv_alone tools/gpu/gemv_alone.cu && ./gemv_alone
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "backend/cuda/matmul_gemv.cu"
#include "gpu_timing.cuh"
#include "weight_stream.cuh"

namespace hibana::cuda {
cudaStream_t g_s;
void throw_cuda(cudaError_t e, const char* w) {
  std::fprintf(stderr, "%s: %s\n", w, cudaGetErrorString(e));
  std::exit(1);
}
cudaStream_t stream() {
  return g_s;
}
bool pdl_enabled() {
  return std::getenv("PDL") != nullptr;
}
int num_sms() {
  int dev = 0, n = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}
int smem_per_block() {
  int dev = 0, n = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return n;
}
Scratch::Scratch(size_t, bool) {}
Scratch::~Scratch() {}
namespace mm {
std::unique_ptr<Scratch> split_scratch(Params&, int64_t, int64_t, int64_t, int) {
  return nullptr;
}
}  // namespace mm
}  // namespace hibana::cuda

using namespace hibana::cuda;

namespace {

// EXPERTS=1: the 80B's batch-1 expert gate/up as the engine launches it (fp8, one grouped
// SwiGLU launch of 11 slices: 10 routed experts and the shared one, 1024 x 2048 each, routing
// arrays in device memory), each launch of a replayed graph of kSteps with its own 11 random
// experts of 512, beside the bare stream of the same matrices (stream_table_kernel). The 512
// experts lie evenly over SPREADS GiB each ("1 8 32 64" by default; up to what the GPU has
// free): whether the experts' footprint (their TLB reach: the 80B's are ~75 GB) slows them.
int experts_main() {
  constexpr int E = 512, kPairs = 11, kSteps = 48;
  constexpr int64_t I = 512, H = 2048, kMat = 2 * I * H;  // bytes of a stacked fp8 gate/up
  size_t free_b = 0, total_b = 0;
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  const char* env = std::getenv("SPREADS");
  std::vector<int64_t> spreads;
  for (const char* c = env ? env : "1 8 32 64"; *c;) {
    char* end = nullptr;
    const long long v = std::strtoll(c, &end, 10);
    if (end == c) break;
    spreads.push_back(v);
    c = end;
  }
  const int64_t most = static_cast<int64_t>((free_b >> 30) - 4);  // GiB, leaving 4 free
  int64_t big = 1;
  for (int64_t& g : spreads) big = std::max(big, g = std::min(g, most));
  uint8_t* base = nullptr;
  CHECK(cudaMalloc(&base, static_cast<size_t>(big) << 30));
  wstream::fill_random<<<4096, 256>>>(reinterpret_cast<uint32_t*>(base), (big << 30) / 4, 3);
  std::vector<float> ones(static_cast<size_t>(2 * I / 128 * H / 128), 1.0f);
  float *scales = nullptr, *x = nullptr, *out = nullptr;
  CHECK(cudaMalloc(&scales, ones.size() * 4));
  CHECK(cudaMemcpy(scales, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&x, H * 4));
  CHECK(cudaMemset(x, 0, H * 4));
  CHECK(cudaMalloc(&out, kPairs * I * 4));
  unsigned* sink = nullptr;
  CHECK(cudaMalloc(&sink, 4));
  // Each step's routing as a grouping leaves it: offsets [E + 1] (route_one_kernel writes only
  // the active experts' and the ones after them; here every entry), rows [pairs], active [E]
  // then n_active; the experts ascending, pair j in the j-th row.
  std::vector<std::vector<int>> picks(kSteps);
  uint32_t rng = 12345;
  std::vector<int32_t*> offs(kSteps), rws(kSteps), act(kSteps);
  for (int s = 0; s < kSteps; ++s) {
    std::vector<int>& e = picks[s];
    while (static_cast<int>(e.size()) < kPairs) {
      rng = rng * 1664525u + 1013904223u;
      const int c = static_cast<int>((rng >> 8) % E);
      if (std::find(e.begin(), e.end(), c) == e.end()) e.push_back(c);
    }
    std::sort(e.begin(), e.end());
    std::vector<int32_t> o(E + 1), r(kPairs), a(E + 1, 0);
    for (int i = 0, j = 0; i <= E; ++i) {
      o[i] = j;
      if (j < kPairs && e[j] == i) ++j;
    }
    for (int j = 0; j < kPairs; ++j) {
      a[j] = e[j];
      r[j] = j;
    }
    a[E] = kPairs;
    CHECK(cudaMalloc(&offs[s], o.size() * 4));
    CHECK(cudaMalloc(&rws[s], r.size() * 4));
    CHECK(cudaMalloc(&act[s], a.size() * 4));
    CHECK(cudaMemcpy(offs[s], o.data(), o.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(rws[s], r.data(), r.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(act[s], a.data(), a.size() * 4, cudaMemcpyHostToDevice));
  }
  mm::MatPtr* table = nullptr;
  CHECK(cudaMalloc(&table, E * sizeof(mm::MatPtr)));
  CHECK(cudaDeviceSynchronize());
  const double bytes = static_cast<double>(kPairs) * kMat;
  for (const int64_t gib : spreads) {
    // expert e at e * (spread / E), 2 MiB aligned
    const int64_t step_b = ((gib << 30) / E) >> 21 << 21;
    std::vector<mm::MatPtr> mats(E);
    for (int e = 0; e < E; ++e) mats[e] = {base + e * step_b, scales};
    CHECK(cudaMemcpy(table, mats.data(), E * sizeof(mm::MatPtr), cudaMemcpyHostToDevice));
    int s = 0;
    const float us = graph_us(g_s, kSteps, [&] {
      mm::Params p = {};
      p.N = 2 * I;
      p.K = H;
      p.ldw = H;
      p.scale_kind = 1;
      p.block_rows = p.block_cols = 128;
      p.scale_ld = H / 128;
      p.x = x;
      p.ldx = H;
      p.out = out;
      p.ldo = I;
      p.M = kPairs;
      p.split_len = H;
      p.splits = 1;
      p.vec_w = p.vec_x = true;
      p.mats = table;
      p.group_offset = offs[s];
      p.group_rows = rws[s];
      p.x_div = kPairs;
      p.active = act[s];
      p.n_active = act[s] + E;
      p.pair = I;
      mm::run_gemv(p, Elt::fp8, true, 1, kPairs);
      s = (s + 1) % kSteps;
    });
    const size_t smem = wstream::kRingBytes;
    CHECK(cudaFuncSetAttribute(wstream::stream_table_kernel,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem)));
    s = 0;
    const float us2 = graph_us(g_s, kSteps, [&] {
      wstream::MatTable t = {};
      for (int j = 0; j < kPairs; ++j) t.w[j] = base + picks[s][j] * step_b;
      wstream::stream_table_kernel<<<dim3(2 * I / 64, 1, kPairs), wstream::kWarps * 32, smem,
                                     g_s>>>(t, H, sink);
      s = (s + 1) % kSteps;
    });
    std::printf("experts over %3lld GiB: gate/up %7.2f us %7.1f GB/s, bare stream %7.2f us "
                "%7.1f GB/s\n",
                static_cast<long long>(gib), us, bytes / (us * 1e-6) / 1e9, us2,
                bytes / (us2 * 1e-6) / 1e9);
  }
  return 0;
}

}  // namespace

int main() {
  CHECK(cudaStreamCreateWithFlags(&g_s, cudaStreamNonBlocking));
  if (std::getenv("EXPERTS")) return experts_main();
  const size_t max_bytes = size_t(256) << 20;
  void *w0, *w1, *x, *out;
  CHECK(cudaMalloc(&w0, max_bytes));
  CHECK(cudaMalloc(&w1, max_bytes));
  wstream::fill_random<<<1024, 256>>>(static_cast<uint32_t*>(w0), max_bytes / 4, 1);
  wstream::fill_random<<<1024, 256>>>(static_cast<uint32_t*>(w1), max_bytes / 4, 2);
  CHECK(cudaMalloc(&x, 8 * 16384 * 4));
  CHECK(cudaMemset(x, 0, 8 * 16384 * 4));
  CHECK(cudaMalloc(&out, 8 * 32768 * 4));
  CHECK(cudaDeviceSynchronize());
  const bool fp8 = std::getenv("DTYPE") && std::string(std::getenv("DTYPE")) == "fp8";
  const Elt elt = fp8 ? Elt::fp8 : Elt::bf16;
  const int64_t esize = fp8 ? 1 : 2;
  std::vector<std::array<int64_t, 2>> shapes = {
      {24576, 4096}, {6144, 4096}, {12288, 2048}, {4096, 4096}};
  if (fp8) shapes = {{12352, 2048}, {2048, 4096}, {1024, 2048}, {2048, 512}};
  void* scales = nullptr;  // 1.0 everywhere: enough for the largest shape's blocks
  if (fp8) {
    const std::vector<float> ones(size_t(1) << 16, 1.0f);
    CHECK(cudaMalloc(&scales, ones.size() * 4));
    CHECK(cudaMemcpy(scales, ones.data(), ones.size() * 4, cudaMemcpyHostToDevice));
  }
  for (const auto& sh : shapes) {
    for (int rows : {1, 3}) {
      mm::Params p = {};
      p.N = sh[0];
      p.K = sh[1];
      p.ldw = p.K;
      p.x = static_cast<const float*>(x);
      p.ldx = p.K;
      p.out = static_cast<float*>(out);
      p.ldo = p.N;
      p.M = rows;
      p.split_len = p.K;
      p.splits = 1;
      p.vec_w = p.vec_x = true;
      p.x_div = 1;
      if (fp8) {
        p.scale_kind = 1;
        p.block_rows = p.block_cols = 128;
        p.scale_ld = (p.K + 127) / 128;
      }
      const size_t bytes = p.N * p.K * esize;
      int flip = 0;
      const float us = graph_us(g_s, 20, [&] {
        p.single.w = (flip++ & 1) ? w1 : w0;
        p.single.scale = scales;
        mm::run_gemv(p, elt, false, rows, 1);
      });
      std::printf("%8lld %8lld rows %d %10.2f us %8.1f GB/s\n", (long long)p.N, (long long)p.K,
                  rows, us, bytes / (us * 1e-6) / 1e9);
      if (rows != 1) continue;
      // The bare stream with the ring alone (48 KiB) and with the shared activations' room
      // added (as the decode matmul asks for at one row: fewer CTAs fit on an SM).
      // (the pitch depends on the element size only, not on the ring)
      const size_t pitch = fp8 ? mm::Gemv<Elt::fp8, 6 << 10>::plane_pitch_bytes(p.K)
                               : mm::Gemv<Elt::bf16, 12 << 10>::plane_pitch_bytes(p.K);
      for (const size_t extra : {size_t{0}, size_t{3} * pitch}) {
        const size_t smem = wstream::kRingBytes + extra;
        CHECK(cudaFuncSetAttribute(wstream::stream_kernel<false>,
                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(smem)));
        flip = 0;
        const float us2 = graph_us(g_s, 20, [&] {
          wstream::stream_kernel<false><<<p.N / 64, wstream::kWarps * 32, smem, g_s>>>(
              static_cast<const uint8_t*>((flip++ & 1) ? w1 : w0), p.K * esize,
              static_cast<unsigned*>(out));
        });
        std::printf("%8lld %8lld stream%s %9.2f us %8.1f GB/s\n", (long long)p.N, (long long)p.K,
                    extra ? "+x" : "  ", us2, bytes / (us2 * 1e-6) / 1e9);
      }
    }
  }
  return 0;
}
