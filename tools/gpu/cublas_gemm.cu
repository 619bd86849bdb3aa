// What cuBLASLt makes of the prefill products that hibana's own tiled kernel runs. Issue #6 asks
// for cuBLAS/cuBLASLt on large prefill GEMMs; hibana's kernel instead keeps the bits of every
// path equal (the three bf16 terms of f32 activations, the decode kernels' split order), at a
// few percent of the tensor cores' peak. This says what that costs: TFLOP/s of
// D[M,N] = X[M,K] W[N,K]^T, bf16 or fp8 e4m3 inputs (per-tensor scales of 1: Hopper's cuBLASLt
// has no 128-block scales), f32 accumulation, bf16 output, the heuristic's first algorithm —
// beside `hibana bench matmul --device cuda --dtype bf16 --batch 8192 --shapes ...` at the same
// shapes (tools/gpu/check.sh cublas runs both).
//
// Not part of the build (a measuring tool, like the rest of tools/gpu):
//   nvcc -O3 -std=c++17 -arch=sm_90 -o cublas_gemm tools/gpu/cublas_gemm.cu -lcublasLt
//   ./cublas_gemm [M] [NxK,...]
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gpu_timing.cuh"

#define CHECK_LT(x)                                               \
  do {                                                            \
    cublasStatus_t s_ = (x);                                      \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                            \
      std::fprintf(stderr, "%s: cuBLAS status %d\n", #x, (int)s_); \
      std::exit(1);                                               \
    }                                                             \
  } while (0)

// Bytes of small pseudo-random values, valid in bf16 and in e4m3 (no NaN patterns): each byte's
// top bits cleared, so bf16 pairs are small finite numbers and e4m3 bytes are below 0x78.
__global__ void fill_kernel(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    p[i] = static_cast<uint8_t>((h & 0x37) | ((h >> 8) & 0x80));
  }
}

// One product of M rows on [N, K] weights in `type` (CUDA_R_16BF or CUDA_R_8F_E4M3), timed as
// the best of five runs of 20 calls; returns us per call (0 where cuBLASLt has no algorithm).
double time_gemm(cublasLtHandle_t lt, cudaDataType_t type, int64_t M, int64_t N, int64_t K,
                 void* workspace, size_t ws_bytes, cudaStream_t s) {
  const size_t esize = type == CUDA_R_16BF ? 2 : 1;
  uint8_t *w = nullptr, *x = nullptr, *d = nullptr;
  CHECK(cudaMalloc(&w, N * K * esize));
  CHECK(cudaMalloc(&x, M * K * esize));
  CHECK(cudaMalloc(&d, M * N * 2));
  fill_kernel<<<1024, 256, 0, s>>>(w, N * K * esize, 1);
  fill_kernel<<<1024, 256, 0, s>>>(x, M * K * esize, 2);
  // Column-major: D^T [N, M] = W^T' [N, K] (W row-major is K x N column-major: op T) times
  // X^T [K, M] (X row-major is K x M column-major: op N). "TN", which fp8 needs on Hopper.
  cublasLtMatmulDesc_t op;
  CHECK_LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t t = CUBLAS_OP_T;
  CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
  cublasLtMatrixLayout_t a, b, c;
  CHECK_LT(cublasLtMatrixLayoutCreate(&a, type, K, N, K));
  CHECK_LT(cublasLtMatrixLayoutCreate(&b, type, K, M, K));
  CHECK_LT(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, N, M, N));
  cublasLtMatmulPreference_t pref;
  CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
  CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &ws_bytes, sizeof(ws_bytes)));
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, 1, &res, &found);
  double us = 0;
  if (found > 0) {
    const float alpha = 1.0f, beta = 0.0f;
    auto call = [&] {
      CHECK_LT(cublasLtMatmul(lt, op, &alpha, w, a, x, b, &beta, d, c, d, c, &res.algo, workspace,
                              ws_bytes, s));
    };
    call();  // warm-up
    us = best_ms(s, [&] {
           for (int i = 0; i < 20; ++i) call();
         }) * 1e3 / 20;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(c);
  cublasLtMatmulDescDestroy(op);
  CHECK(cudaFree(w));
  CHECK(cudaFree(x));
  CHECK(cudaFree(d));
  return us;
}

int main(int argc, char** argv) {
  const int64_t M = argc > 1 ? std::atoll(argv[1]) : 8192;
  // The 8B's q/k/v, o, gate/up and down; the 80B's DeltaNet in- and out-projections.
  std::string shapes = argc > 2 ? argv[2]
                                : "6144x4096,4096x4096,24576x4096,4096x12288,12352x2048,2048x4096";
  cublasLtHandle_t lt;
  CHECK_LT(cublasLtCreate(&lt));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  const size_t ws_bytes = size_t(32) << 20;
  void* workspace = nullptr;
  CHECK(cudaMalloc(&workspace, ws_bytes));
  std::printf("cuBLASLt %zu, M = %lld rows\n", cublasLtGetVersion(), static_cast<long long>(M));
  std::printf("%8s %8s %6s %10s %10s\n", "N", "K", "dtype", "us/call", "TFLOP/s");
  for (char* tok = std::strtok(shapes.data(), ","); tok; tok = std::strtok(nullptr, ",")) {
    long long N = 0, K = 0;
    if (std::sscanf(tok, "%lldx%lld", &N, &K) != 2) {
      std::fprintf(stderr, "shapes are NxK, not '%s'\n", tok);
      return 2;
    }
    for (cudaDataType_t type : {CUDA_R_16BF, CUDA_R_8F_E4M3}) {
      const double us = time_gemm(lt, type, M, N, K, workspace, ws_bytes, s);
      const char* name = type == CUDA_R_16BF ? "bf16" : "fp8";
      if (us <= 0) {
        std::printf("%8lld %8lld %6s  no algorithm\n", N, K, name);
      } else {
        std::printf("%8lld %8lld %6s %10.1f %10.1f\n", N, K, name, us, 2.0 * M * N * K / us / 1e6);
      }
    }
  }
  CHECK(cudaFree(workspace));
  cublasLtDestroy(lt);
  return 0;
}
