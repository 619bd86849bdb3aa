// The serving engine: many requests, one model, continuous batching. A worker thread runs
// steps; each step decodes one token for every running sequence and fills the rest of a token
// budget with prefill chunks, admitting queued requests only when their state fits. Requests
// are submitted from any thread and stream their tokens back through a RequestStream.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/logits_processor.h"
#include "engine/sampler.h"
#include "model/model.h"

namespace hibana {

using SteadyClock = std::chrono::steady_clock;

struct GenerationRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 256;
  SamplingParams sampling;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // besides the model's eos ids
  std::map<int32_t, float> logit_bias;  // added to the logits before sampling
  int32_t top_logprobs = -1;            // -1: no logprobs; 0..20: that many alternatives
  std::optional<SteadyClock::time_point> deadline;
  std::string conversation;  // agent/conversation key (for state reuse)
  // Position where a recurrent checkpoint pays off (the start of the last user message): the
  // engine keeps the state at the page boundary at or before it. -1: none.
  int64_t checkpoint_at = -1;
  // Optional constraint (e.g. JsonConstraint): masks logits before sampling; when it reports
  // complete() after a token, the request ends with FinishReason::stop.
  std::shared_ptr<LogitsProcessor> processor;
};

enum class FinishReason { none, length, stop, cancelled, deadline, error };
const char* finish_reason_name(FinishReason r);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct StreamEvent {
  enum class Kind { token, finished } kind = Kind::token;
  int32_t token = -1;
  float logprob = 0.0f;  // when logprobs were asked for
  std::vector<TokenLogprob> top_logprobs;
  FinishReason finish = FinishReason::none;  // for Kind::finished
  std::string error;                         // for FinishReason::error
};

struct RequestUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens whose state was reused instead of recomputed
};

// One request's output queue. The engine pushes; the consumer pops; either may cancel.
class RequestStream {
 public:
  explicit RequestStream(uint64_t id) : id_(id) {}
  uint64_t id() const { return id_; }

  // Waits for the next event until `until`; false on timeout. After a Kind::finished event
  // nothing more arrives.
  bool next(StreamEvent& event, SteadyClock::time_point until);
  // Asks the engine to stop this request (client gone, stop string seen). The engine frees its
  // state within one step and then sends a finished event with FinishReason::cancelled.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  RequestUsage usage() const;

  // Engine side.
  void push(StreamEvent event);
  void set_usage(const RequestUsage& u);

 private:
  const uint64_t id_;
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<StreamEvent> events_;
  RequestUsage usage_;
};

constexpr int64_t kGpuPrefillTokens = 4096;  // EngineOptions::prefill_token_budget's auto

struct EngineOptions {
  int64_t page_size = 64;
  // KV pages of all sequences; 0: sized from the device's free memory (engine/kv_sizing.h).
  int64_t kv_cache_bytes = int64_t(1) << 30;
  // Draw from summaries of the logits rows (their largest entries and sums, computed where the
  // rows are) when they suffice; false moves every whole row to the host (for comparisons).
  bool sample_from_summaries = true;
  int64_t max_sequences = 32;                 // running at once (recurrent slots)
  int64_t step_token_budget = 512;            // tokens per forward pass (decode + prefill)
  // Tokens of a pass with no decode rows, which keeps no generating sequence waiting: -1 (auto)
  // kGpuPrefillTokens on a GPU, step_token_budget elsewhere; never less than step_token_budget.
  // The MoE experts' weights are read once a pass: the 80B's 8k-token prompt took 3.29 s in
  // 512-token passes, 1.68 s in 2048-token ones and 1.30 s in one (H100, docs/benchmarks.md).
  int64_t prefill_token_budget = -1;
  int64_t max_queue = 1024;                   // waiting requests before submit() refuses
  int64_t max_context = 0;                    // 0: the model's max_position_embeddings
  GdnMode gdn_mode = GdnMode::aligned_chunks;
  // Prefix cache: reuse the state of earlier requests' common prefixes.
  bool prefix_cache = true;
  int64_t checkpoint_slots = 32;       // recurrent checkpoints kept (hybrid models)
  int64_t checkpoint_interval = 4096;  // also checkpoint every N prompt tokens
  // SSD tier: blocks evicted from memory (and all of them at shutdown) are written here and
  // restored when a returning conversation needs them. Empty: no SSD tier. Rank R of a
  // tensor-parallel model's N keeps its shard's blocks in cache_dir/rank-R-of-N.
  std::string cache_dir;
  int64_t ssd_cache_bytes = int64_t(16) << 30;
  // Host-RAM tier between the device pool and the SSD (0: none). Skipped on unified memory.
  int64_t host_cache_bytes = 0;
};

// Counters and histograms for /metrics (monotonic except the gauges).
struct Histogram {
  std::vector<double> bounds;    // upper bounds, seconds
  std::vector<uint64_t> counts;  // one per bound, plus +Inf at the end
  double sum = 0.0;
  uint64_t count = 0;
  explicit Histogram(std::vector<double> b = {})
      : bounds(std::move(b)), counts(bounds.size() + 1) {}
  void observe(double v);
};

struct EngineMetrics {
  int64_t running = 0;
  int64_t waiting = 0;
  uint64_t requests_finished = 0;
  uint64_t prompt_tokens = 0;
  uint64_t generation_tokens = 0;
  uint64_t prefix_query_tokens = 0;
  uint64_t prefix_hit_tokens = 0;
  uint64_t preemptions = 0;
  uint64_t steps = 0;
  // Tokens drawn from a summary of their logits row, and rows fetched whole after all.
  uint64_t summary_draws = 0, whole_row_fetches = 0;
  int64_t kv_pages_used = 0, kv_pages_total = 0;
  int64_t kv_bytes = 0, recurrent_bytes = 0, weight_bytes = 0;
  int64_t cache_nodes = 0, cache_pages = 0, cache_checkpoints = 0;
  uint64_t device_hit_tokens = 0, ssd_hit_tokens = 0;
  uint64_t spilled_bytes = 0, restored_bytes = 0, restored_blocks = 0, restores_declined = 0;
  double restore_seconds = 0;
  uint64_t ssd_blocks = 0, ssd_bytes = 0, ssd_corrupt = 0, ssd_write_failures = 0, ssd_hits = 0;
  uint64_t host_blocks = 0, host_bytes = 0, host_hits = 0, host_written_down = 0;
  uint64_t host_prefetched = 0;  // blocks read from the SSD ahead of the request needing them
  double prefill_tokens_per_second = 0, ssd_read_bytes_per_second = 0;  // measured at start
  Histogram ttft{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  Histogram itl{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};
  Histogram e2e{{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};
};

class Engine {
 public:
  Engine(std::shared_ptr<const Model> model, const EngineOptions& options);
  ~Engine();  // stops the worker; unfinished requests end with FinishReason::cancelled
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Throws Error(invalid_argument) for an empty prompt, ids outside the
  // vocabulary or a prompt that does not fit the context (the message gives both counts),
  // Error(overloaded) when the queue is full.
  std::shared_ptr<RequestStream> submit(GenerationRequest request);

  const Model& model() const { return *model_; }
  int64_t max_context() const { return max_context_; }
  EngineMetrics metrics() const;
  // Blocks until nothing is running or waiting (tests, shutdown).
  void wait_idle();
  // While held, queued requests stay queued (running ones go on): lets a caller queue several
  // requests before the scheduler sees any of them.
  void hold_admission(bool hold);

 private:
  struct Sequence;
  void loop();
  bool step();  // false when there was nothing to do
  void admit_waiting();
  void finish(Sequence& s, FinishReason reason, const std::string& error = {});
  void preempt_newest();
  void checkpoint_if_due(Sequence& s);
  struct TierCosts measure_costs();
  // Tensor parallelism: the other ranks open host-RAM and SSD tiers like rank 0's (their own
  // shard's bytes, their own subdirectory of the cache dir) and close them with the engine.
  void open_rank_tiers();
  void close_rank_tiers();
  bool rank_tiers_open_ = false;
  bool ensure_pages(Sequence& s, int64_t positions);
  void release(Sequence& s);
  void refresh_metrics();

  std::shared_ptr<const Model> model_;
  EngineOptions options_;
  int64_t max_context_ = 0;
  struct Pools;
  std::unique_ptr<Pools> pools_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // worker thread only (count mirrored)
  EngineMetrics metrics_;
  uint64_t next_id_ = 1;
  bool stop_ = false;
  bool held_ = false;
  std::thread worker_;

  // Prefetch of waiting requests' blocks from the SSD into the host tier (both tiers on; not
  // with tensor parallelism, where every rank's tiers move only in step with rank 0's). The
  // prefetcher thread must not touch the device pool or the prefix index, so the engine thread
  // hands it each waiting prompt together with how much of it the device already holds.
  struct PrefetchJob {
    std::vector<int32_t> tokens;
    int64_t device_blocks = 0;      // leading blocks whose KV is in the device pool
    int64_t device_checkpoint = 0;  // depth of the deepest of them with a device checkpoint
  };
  bool prefetching() const;
  void hand_to_prefetcher(std::span<const int32_t> tokens);  // engine thread
  void prefetch_loop();
  bool prefetch_pending_ = false;  // (mutex_) waiting prompts not yet handed to the prefetcher
  std::mutex prefetch_mutex_;
  std::condition_variable prefetch_wake_;
  std::deque<PrefetchJob> prefetch_queue_;
  bool prefetch_stop_ = false;
  std::thread prefetcher_;
};

}  // namespace hibana
