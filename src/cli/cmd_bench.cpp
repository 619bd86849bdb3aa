// hibana bench decode|prefill (matmul: cmd_bench_matmul.cpp): speed at given shapes, as tokens/s and as a fraction of the
// memory roofline (bytes a step must read / measured copy bandwidth).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "cli/commands.h"
#include "cli/model_args.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/generator.h"

namespace hibana::cli {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Host memory bandwidth, counting bytes read + written by a parallel memcpy of 512 MiB.
double measure_copy_bandwidth() {
  const size_t bytes = size_t(512) << 20;
  Buffer a(bytes), b(bytes);
  std::memset(a.data(), 1, bytes);
  std::memset(b.data(), 2, bytes);
  ThreadPool& pool = default_thread_pool();
  const int64_t parts = pool.size() * 4;
  auto copy = [&] {
    pool.parallel_for(parts, [&](int64_t i) {
      size_t chunk = bytes / parts;
      std::memcpy(static_cast<char*>(b.data()) + i * chunk, static_cast<char*>(a.data()) + i * chunk,
                  chunk);
    });
  };
  copy();
  double best = 1e30;
  for (int rep = 0; rep < 10; ++rep) {  // best of 10: other processes only slow it down
    auto t0 = Clock::now();
    copy();
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * bytes / best;
}

struct BenchArgs {
  ModelArgs model;
  std::string batches = "1";
  int64_t context = 1024;
  int64_t steps = 8;
  int64_t prompt = 512;
  int64_t chunk = 0;  // prefill passes of this many tokens (0: the whole prompt in one)
  bool whole_logits = false;
  // Each row's summary as a sampled request asks for it (its k largest entries and sums at
  // this temperature); the default, k 1 at -1, is a greedy request's.
  int64_t summary_k = 1;
  float temperature = -1.0f;
};

// Weight bytes one decode step of `batch` tokens reads: every dense matrix once, the expected
// number of distinct experts under uniform routing, the embedding rows and the lm_head.
double weight_bytes_per_step(const Model& m, int64_t batch) {
  const ModelConfig& c = m.config();
  double per_token_experts = 0.0, dense = static_cast<double>(m.bytes_per_token());
  for (const LayerWeights& l : m.weights().layers) {
    if (l.ffn != FfnKind::moe || l.moe.experts.gate.empty()) continue;
    const double one = static_cast<double>(l.moe.experts.gate[0].nbytes() +
                                           l.moe.experts.up[0].nbytes() +
                                           l.moe.experts.down[0].nbytes());
    const double k = static_cast<double>(c.experts_per_token), E = static_cast<double>(c.num_experts);
    dense -= k * one;
    per_token_experts += one * E * (1.0 - std::pow(1.0 - k / E, static_cast<double>(batch)));
  }
  const double embed_row = static_cast<double>(m.weights().embed.nbytes()) / c.vocab_size;
  return dense + per_token_experts + embed_row * (batch - 1);
}

int run_decode(const BenchArgs& a) {
  std::unique_ptr<Model> model = a.model.load();
  std::vector<int32_t> batches = parse_id_list(a.batches);
  double bw = model->backend().copy_bandwidth();
  if (bw <= 0.0) bw = measure_copy_bandwidth();
  const StateSpec spec = model->state_spec();
  std::printf("model: %s on %s (%d threads)\n", model->source().c_str(),
              model->backend().name().c_str(), default_thread_pool().size());
  std::printf("measured copy bandwidth: %.2f GB/s (read + write)\n", bw / 1e9);
  if (!a.whole_logits && (a.summary_k != 1 || a.temperature >= 0.0f)) {
    std::printf("each row's summary: its %lld largest entries, sums at temperature %g\n",
                static_cast<long long>(a.summary_k), static_cast<double>(a.temperature));
  }
  std::printf("%6s %8s %12s %14s %12s %10s\n", "batch", "context", "tokens/s", "ms/step",
              "GB/step", "roofline");
  for (int32_t batch : batches) {
    check(batch > 0, ErrorKind::invalid_argument, "batch sizes must be positive");
    const int64_t positions = a.context + a.steps + 2;
    StatePool pool = make_pool_for(*model, positions, batch);
    std::vector<std::unique_ptr<SequenceState>> seqs;
    for (int32_t i = 0; i < batch; ++i) {
      seqs.push_back(std::make_unique<SequenceState>(pool));
      seqs.back()->reserve(positions);
    }
    std::vector<int32_t> tokens(batch);
    for (int32_t i = 0; i < batch; ++i) tokens[i] = (17 * i + 3) % static_cast<int32_t>(model->config().vocab_size);
    ForwardOutput out;
    auto step = [&](int64_t pos) {
      std::vector<SequenceInput> in(batch);
      for (int32_t i = 0; i < batch; ++i) {
        in[i].tokens = std::span<const int32_t>(&tokens[i], 1);
        in[i].start_pos = pos;
        in[i].pages = seqs[i]->pages();
        in[i].slot = seqs[i]->slot();
      }
      // As an engine step of greedy requests: each row's greedy summary comes back (or, with
      // --whole-logits, every row whole, as the engine did before summaries).
      ForwardOptions fo;
      if (!a.whole_logits) {
        fo.summary_k = a.summary_k;
        fo.summary_temperature.assign(static_cast<size_t>(batch), a.temperature);
      }
      model->forward(in, pool.views(), fo, out);
    };
    step(a.context);  // warm-up (on a GPU it also records the step's graph)
    model->backend().timing_report();  // forget the warm-up's op times
    const int64_t replays_before = model->decode_graph_replays();
    auto t0 = Clock::now();
    for (int64_t s = 0; s < a.steps; ++s) step(a.context + 1 + s);
    const double per_step = seconds_since(t0) / static_cast<double>(a.steps);
    const int64_t replayed = model->decode_graph_replays() - replays_before;
    const std::string timing = model->backend().timing_report();
    const double bytes = weight_bytes_per_step(*model, batch) +
                         static_cast<double>(batch) *
                             (static_cast<double>(spec.kv_bytes_per_token()) * a.context +
                              2.0 * static_cast<double>(spec.recurrent_bytes_per_slot()));
    // The roofline counts reads only; bandwidth was measured as read + write traffic.
    const double roofline = (bytes / per_step) / bw;
    std::printf("%6d %8lld %12.1f %14.3f %12.4f %9.1f%%\n", batch,
                static_cast<long long>(a.context), batch / per_step, per_step * 1e3, bytes / 1e9,
                100.0 * roofline);
    if (replayed > 0) {
      std::printf("  %lld of %lld steps replayed as a CUDA graph\n", static_cast<long long>(replayed),
                  static_cast<long long>(a.steps));
    }
    if (!timing.empty()) {
      std::printf("  GPU time per op over %lld steps (HIBANA_CUDA_TIMING):\n%s",
                  static_cast<long long>(a.steps), timing.c_str());
    }
  }
  return 0;
}

int run_prefill(const BenchArgs& a) {
  std::unique_ptr<Model> model = a.model.load();
  const int64_t n = a.prompt;
  check(n > 0, ErrorKind::invalid_argument, "--prompt-tokens must be positive");
  check(a.chunk >= 0, ErrorKind::invalid_argument, "--chunk must be 0 (one pass) or positive");
  const int64_t chunk = a.chunk > 0 ? std::min(a.chunk, n) : n;
  StatePool pool = make_pool_for(*model, n);
  std::vector<int32_t> tokens(n);
  for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>((31 * i + 7) % model->config().vocab_size);
  auto once = [&] {
    SequenceState seq(pool);
    seq.reserve(n);
    SequenceInput in;
    in.pages = seq.pages();
    in.slot = seq.slot();
    ForwardOutput out;
    auto t0 = Clock::now();
    for (int64_t s = 0; s < n; s += chunk) {  // (each pass continues the sequence)
      const size_t len = static_cast<size_t>(std::min(chunk, n - s));
      in.tokens = std::span<const int32_t>(tokens.data() + s, len);
      in.start_pos = s;
      model->forward(std::span<const SequenceInput>(&in, 1), pool.views(), ForwardOptions{}, out);
    }
    return seconds_since(t0);
  };
  once();
  model->backend().timing_report();  // forget the warm-up's op times
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) best = std::min(best, once());
  const std::string timing = model->backend().timing_report();
  // Matmul work per token: every layer's dense matrices, the k routed experts and the shared
  // expert of MoE layers; plus the lm_head for the one row of each pass that needs logits.
  // Attention's quadratic part is not counted.
  double per_token = 0.0;
  for (const LayerWeights& l : model->weights().layers) {
    double experts = 0.0;
    for_each_matrix(l, [&](const Weight& w, MatrixRole role) {
      const double p = static_cast<double>(w.rows() * w.cols());
      if (role == MatrixRole::dense) per_token += p; else experts += p;
    });
    if (!l.moe.experts.gate.empty()) {
      per_token += experts / static_cast<double>(l.moe.experts.gate.size()) *
                   static_cast<double>(model->config().experts_per_token);
    }
  }
  const Weight& head = model->weights().lm_head;
  const double passes_run = static_cast<double>((n + chunk - 1) / chunk);
  const double flops =
      2.0 * (per_token * n + passes_run * static_cast<double>(head.rows() * head.cols()));
  std::printf("model: %s on %s (%d threads)\n", model->source().c_str(),
              model->backend().name().c_str(), default_thread_pool().size());
  const std::string passes =
      chunk < n ? " in passes of " + std::to_string(chunk) : std::string();
  std::printf("prefill %lld tokens%s: %.1f tokens/s (%.3f s), %.1f GFLOP/s in matmuls "
              "(2 x active matrix parameters x tokens)\n",
              static_cast<long long>(n), passes.c_str(), n / best, best, flops / best / 1e9);
  if (!timing.empty()) std::printf("  GPU time per op over 3 passes (HIBANA_CUDA_TIMING):\n%s", timing.c_str());
  if (const int64_t trims = model->backend().memory_info().pool_trims; trims > 0) {
    std::printf("GPU memory ran short %lld times (each allocation waited for the stream and the "
                "pool's idle memory)\n", static_cast<long long>(trims));
  }
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, Action& action) {
  CLI::App* bench = app.add_subcommand("bench", "measure speed");
  bench->require_subcommand(1);
  auto d = std::make_shared<BenchArgs>();
  CLI::App* dec = bench->add_subcommand("decode", "decode tokens/s per batch size");
  d->model.add_to(*dec);
  dec->add_option("--batch", d->batches, "batch sizes, e.g. 1,8,32,64");
  dec->add_option("--context", d->context, "tokens already in each sequence (default 1024)");
  dec->add_option("--steps", d->steps, "timed decode steps (default 8)");
  dec->add_flag("--whole-logits", d->whole_logits,
                "move every logits row to the host (default: each row's greedy summary)");
  dec->add_option("--summary-k", d->summary_k,
                  "entries in each row's summary, as a sampled request's top_k asks (default 1)")
      ->check(CLI::Range(1, 256));
  dec->add_option("--temperature", d->temperature,
                  "the summaries' temperature (default -1: no sums, a greedy request's)");
  dec->callback([&action, d] { action = [d] { return run_decode(*d); }; });
  auto p = std::make_shared<BenchArgs>();
  CLI::App* pre = bench->add_subcommand("prefill", "prefill tokens/s for one prompt");
  p->model.add_to(*pre);
  pre->add_option("--prompt-tokens", p->prompt, "prompt length (default 512)");
  pre->add_option("--chunk", p->chunk,
                  "tokens per forward pass, as the server's steps take a prompt (its default "
                  "512); 0, the default, runs the whole prompt in one pass");
  pre->callback([&action, p] { action = [p] { return run_prefill(*p); }; });
  add_bench_matmul_command(*bench, action);
}

}  // namespace hibana::cli
