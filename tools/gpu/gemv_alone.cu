// The decode matmul kernel (src/backend/cuda/matmul_gemv.cu, included whole) timed alone,
// outside hibana, beside tools/gpu/weight_stream.cu's "rows" kernel over the same buffers with
// the same timing: how much of the gap between the decode matmul and a bare read of its
// weights is the kernel's own. The backend's host pieces it calls are stubbed below; one
// split per product (split_len = K), weights of random bits, activations of zeros. DTYPE=fp8
// runs fp8 weights with 128 x 128 block scales (all 1) on the 80B's shapes (bf16 and the 8B's
// by default).
//
// Not part of the build (a measuring tool, like the rest of tools/gpu); tools/gpu/gemv_variants.sh
// builds it over edited copies of the kernel:
//   nvcc -O3 -std=c++17 -arch=sm_90 --expt-relaxed-constexpr -Isrc -DNDEBUG \
//     -o gemv_alone tools/gpu/gemv_alone.cu && ./gemv_alone
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
Scratch::Scratch(size_t) {}
Scratch::~Scratch() {}
namespace mm {
std::unique_ptr<Scratch> split_scratch(Params&, int64_t, int64_t, int64_t, int) {
  return nullptr;
}
}  // namespace mm
}  // namespace hibana::cuda

using namespace hibana::cuda;

int main() {
  CHECK(cudaStreamCreateWithFlags(&g_s, cudaStreamNonBlocking));
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
      for (const size_t extra :
           {size_t{0}, size_t{3} * (fp8 ? mm::Gemv<Elt::fp8>::plane_pitch_bytes(p.K)
                                         : mm::Gemv<Elt::bf16>::plane_pitch_bytes(p.K))}) {
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
