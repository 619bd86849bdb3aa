// hibana bench matmul: one backend matmul at given shapes and batch sizes, timed in isolation,
// as GB/s of weights streamed (and the fraction of the device's measured copy bandwidth) and
// TFLOP/s. Several copies of each weight are cycled so that a matrix smaller than the GPU's L2
// cache is still read from memory.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>
#include <vector>

#include "cli/commands.h"
#include "cli/model_args.h"
#include "core/device_memory.h"
#include "core/error.h"
#include "core/numeric.h"
#include "model/weights.h"

namespace hibana::cli {

namespace {

struct MatmulArgs {
  std::string device = "cuda";
  std::string dtype = "bf16";
  std::string shapes = "4096x4096,1024x4096,12288x4096,4096x12288,151936x4096";
  std::string batches = "1,8,64";
  int64_t reps = 20;
};

// A tensor's bytes copied to `device`; `keep` owns the copy.
Tensor to_device(const Tensor& t, Device device, std::vector<Buffer>& keep) {
  if (t.empty()) return t;
  keep.emplace_back(t.nbytes(), device);
  copy_bytes(keep.back().data(), device, t.data, Device::cpu, t.nbytes());
  Tensor d = t;
  d.data = keep.back().data();
  d.device = device;
  return d;
}

// A random [N, K] weight in `dtype` (bf16, f32 or fp8 with 128 x 128 block scales) on `device`.
Weight random_weight(int64_t N, int64_t K, const std::string& dtype, uint32_t seed, Device device,
                     std::vector<Buffer>& keep) {
  const bool f32 = dtype == "f32";
  Buffer host(static_cast<size_t>(N * K) * (f32 ? 4 : 2));
  uint32_t s = seed * 2654435761u + 1;
  for (int64_t i = 0; i < N * K; ++i) {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    const float v = (static_cast<float>(s >> 8) / 16777216.0f - 0.5f) * 0.1f;
    if (f32) {
      static_cast<float*>(host.data())[i] = v;
    } else {
      static_cast<uint16_t*>(host.data())[i] = f32_to_bf16(v);
    }
  }
  Weight w;
  w.w = Tensor(host.data(), f32 ? DType::f32 : DType::bf16, {N, K});
  std::vector<std::shared_ptr<void>> owned;
  if (dtype == "fp8") {
    w = quantize_fp8(w, owned);
  } else {
    check(dtype == "bf16" || f32, ErrorKind::invalid_argument,
          "--dtype must be bf16, fp8 or f32, not '" + dtype + "'");
  }
  Weight d = w;
  d.w = to_device(w.w, device, keep);
  d.scale = to_device(w.scale, device, keep);
  return d;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) parts.push_back(item);
  }
  return parts;
}

int run_matmul(const MatmulArgs& a) {
  std::unique_ptr<Backend> be = make_backend(a.device);
  const Device dev = be->device();
  const double bw = be->copy_bandwidth();  // 0 where the backend does not measure it
  std::printf("backend: %s, weights %s, measured copy bandwidth %.2f GB/s\n", be->name().c_str(),
              a.dtype.c_str(), bw / 1e9);
  if (be->can_capture()) std::printf("timed: the calls recorded once as a graph, replayed\n");
  std::printf("%8s %8s %6s %12s %10s %10s %10s\n", "N", "K", "batch", "us/call", "GB/s", "of copy",
              "TFLOP/s");
  const std::vector<int32_t> batches = parse_id_list(a.batches);
  int32_t max_m = 1;
  for (int32_t m : batches) {
    check(m > 0, ErrorKind::invalid_argument, "batch sizes must be positive");
    max_m = std::max(max_m, m);
  }
  for (const std::string& shape : split_list(a.shapes)) {
    int64_t N = 0, K = 0;
    check(std::sscanf(shape.c_str(), "%ldx%ld", &N, &K) == 2 && N > 0 && K > 0,
          ErrorKind::invalid_argument, "shapes are NxK, e.g. 4096x4096, not '" + shape + "'");
    std::vector<Buffer> keep;
    std::vector<Weight> copies = {random_weight(N, K, a.dtype, 1, dev, keep)};
    const int64_t wbytes = static_cast<int64_t>(copies[0].nbytes());
    const int64_t n_copies = std::clamp<int64_t>((int64_t(256) << 20) / wbytes + 1, 1, 16);
    for (int64_t c = 1; c < n_copies; ++c) {
      copies.push_back(random_weight(N, K, a.dtype, static_cast<uint32_t>(c + 1), dev, keep));
    }
    std::vector<float> xh(static_cast<size_t>(max_m * K));
    for (size_t i = 0; i < xh.size(); ++i)
      xh[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
    Tensor x = to_device(Tensor(xh.data(), DType::f32, {max_m, K}), dev, keep);
    keep.emplace_back(static_cast<size_t>(max_m * N) * sizeof(float), dev);
    Tensor out(keep.back().data(), DType::f32, {max_m, N}, dev);
    for (int32_t m : batches) {
      auto call = [&](int64_t i) {
        be->matmul(x.slice_rows(0, m), copies[i % n_copies], out.slice_rows(0, m));
      };
      for (int64_t i = 0; i < n_copies; ++i) call(i);  // warm-up
      be->synchronize();
      // Where the backend records graphs, the timed calls are one recording replayed (as decode
      // steps run): the GPU's cost per call, without the host's launch work.
      std::shared_ptr<void> graph;
      if (be->can_capture()) {
        be->begin_capture();
        for (int64_t i = 0; i < a.reps; ++i) call(i);
        graph = be->end_capture();
        if (graph) be->replay(graph);  // warm-up
        be->synchronize();
      }
      const auto t0 = std::chrono::steady_clock::now();
      if (graph) {
        be->replay(graph);
      } else {
        for (int64_t i = 0; i < a.reps; ++i) call(i);
      }
      be->synchronize();
      const double per =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / a.reps;
      const double gbs = static_cast<double>(wbytes) / per;
      std::printf("%8ld %8ld %6d %12.2f %10.1f %9.1f%% %10.2f\n", N, K, m, per * 1e6, gbs / 1e9,
                  bw > 0.0 ? 100.0 * gbs / bw : 0.0, 2.0 * N * K * m / per / 1e12);
    }
  }
  return 0;
}

}  // namespace

void add_bench_matmul_command(CLI::App& bench, Action& action) {
  auto a = std::make_shared<MatmulArgs>();
  CLI::App* cmd = bench.add_subcommand("matmul", "one matmul's speed per shape and batch size");
  cmd->add_option("--device", a->device, "cpu, cuda (default) or auto");
  cmd->add_option("--dtype", a->dtype, "weight format: bf16 (default), fp8 or f32");
  cmd->add_option("--shapes", a->shapes, "weight shapes NxK, comma-separated");
  cmd->add_option("--batch", a->batches, "batch sizes (rows of x), e.g. 1,8,64");
  cmd->add_option("--reps", a->reps, "timed calls per shape and batch (default 20)");
  cmd->callback([&action, a] { action = [a] { return run_matmul(*a); }; });
}

}  // namespace hibana::cli
