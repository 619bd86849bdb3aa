// Shared by the measuring tools of tools/gpu (launch_floor.cu, weight_stream.cu): error checks,
// the time per launch of a replayed CUDA graph, and the device's copy bandwidth.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                    \
  do {                                                              \
    cudaError_t e_ = (x);                                           \
    if (e_ != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                 \
    }                                                               \
  } while (0)

// Best of 5 timed runs of run() on stream s, in ms.
template <typename Run>
float best_ms(cudaStream_t s, Run&& run) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  float best = 1e30f;
  for (int t = 0; t < 5; ++t) {
    CHECK(cudaEventRecord(a, s));
    run();
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    best = ms < best ? ms : best;
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return best;
}

// Best of 5 replays of a graph of `reps` calls of launch(), in us per call.
template <typename Launch>
float graph_us(cudaStream_t s, int reps, Launch&& launch) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  for (int r = 0; r < reps; ++r) launch();
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&ge, g, 0));
  CHECK(cudaGraphLaunch(ge, s));  // warm-up
  const float ms = best_ms(s, [&] { CHECK(cudaGraphLaunch(ge, s)); });
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  return ms * 1000.0f / reps;
}

// Copy bandwidth (read + write, GB/s) of `bytes` from src to dst, best of 5, as hibana
// reports it.
inline double copy_gbs(cudaStream_t s, void* dst, const void* src, size_t bytes) {
  const float ms =
      best_ms(s, [&] { CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s)); });
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}
