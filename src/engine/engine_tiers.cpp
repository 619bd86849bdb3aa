// The engine's side of the state tiers: the cost probe behind restore decisions, the
// prefetcher that warms host RAM for waiting requests, and the metrics snapshot.
#include <chrono>
#include <span>
#include <thread>

#include "core/device_memory.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/engine_pools.h"
#include "engine/rank_tiers.h"

namespace hibana {

TierCosts Engine::measure_costs() {
  // Restoring from SSD must beat recomputing: time a 128-token prefill and a 4 MiB block read.
  TierCosts c;
  StatePool& pool = pools_->pool;
  const int64_t n = std::min<int64_t>(128, pool.num_pages() * pool.page_size());
  std::vector<int32_t> tokens(n);
  for (int64_t i = 0; i < n; ++i)
    tokens[i] = static_cast<int32_t>((i * 7919 + 13) % model_->config().vocab_size);
  std::vector<int32_t> pages;
  for (int64_t i = 0; i * pool.page_size() < n; ++i) pages.push_back(pool.alloc_page());
  int32_t slot = pool.spec().deltanet_layers > 0 ? pool.alloc_slot() : -1;
  SequenceInput in;
  in.tokens = tokens;
  in.pages = pages;
  in.slot = slot;
  in.logits = LogitsMode::none;
  ForwardOutput out;
  const auto t0 = SteadyClock::now();
  model_->forward(std::span<const SequenceInput>(&in, 1), pool.views(), {}, out);
  c.prefill_tokens_per_second =
      static_cast<double>(n) / std::max(1e-6, seconds_between(t0, SteadyClock::now()));
  for (int32_t p : pages) pool.free_page(p);
  if (slot >= 0) pool.free_slot(slot);
  std::vector<uint8_t> probe(4 << 20, 0x5a);
  const BlockKey key{0x70726f6265ull,
                     static_cast<uint64_t>(SteadyClock::now().time_since_epoch().count())};
  if (pools_->ssd->put(key, 99, probe)) {
    const auto t1 = SteadyClock::now();
    auto back = pools_->ssd->get(key, 99);
    const double s = seconds_between(t1, SteadyClock::now());
    if (back) c.ssd_read_bytes_per_second = static_cast<double>(probe.size()) / std::max(1e-6, s);
  }
  pools_->ssd->clear_block(key);
  if (pools_->host) {
    // A block restored from host RAM costs about one copy of its bytes to the model's device.
    const Device dev = model_->backend().device();
    Buffer target(probe.size(), dev);
    copy_bytes(target.data(), dev, probe.data(), Device::cpu, probe.size());  // warm-up
    const auto t2 = SteadyClock::now();
    copy_bytes(target.data(), dev, probe.data(), Device::cpu, probe.size());
    c.host_read_bytes_per_second =
        static_cast<double>(probe.size()) / std::max(1e-6, seconds_between(t2, SteadyClock::now()));
  }
  metrics_.prefill_tokens_per_second = c.prefill_tokens_per_second;
  metrics_.ssd_read_bytes_per_second = c.ssd_read_bytes_per_second;
  log_info("tier costs: prefill ", static_cast<int64_t>(c.prefill_tokens_per_second),
           " tokens/s, SSD read ", static_cast<int64_t>(c.ssd_read_bytes_per_second / 1e6),
           " MB/s, host RAM to device ", static_cast<int64_t>(c.host_read_bytes_per_second / 1e6),
           " MB/s");
  return c;
}

// The other ranks' tiers move only when rank 0's engine thread moves its own (a block move is
// one message in the stream of passes), so a prefetch thread on rank 0 alone would leave them
// behind: prefetch is off with tensor parallelism.
bool Engine::prefetching() const {
  return pools_->cache && pools_->host && pools_->ssd && model_->ranks() == 1;
}

void Engine::open_rank_tiers() {
  if (model_->ranks() <= 1 || !options_.prefix_cache || (!pools_->host && !pools_->ssd)) return;
  TierSetup setup;
  if (pools_->host) setup.host_bytes = static_cast<uint64_t>(options_.host_cache_bytes);
  if (pools_->ssd) {
    setup.ssd_bytes = static_cast<uint64_t>(options_.ssd_cache_bytes);
    setup.dir = options_.cache_dir;
  }
  BlockMove open;
  open.op = BlockMove::Op::open;
  open.setup = setup.encode();
  PoolBlockMover here(nullptr);  // rank 0's tiers are pools_'s, made already
  rank_tiers_open_ = true;       // a rank that opened them closes them with the engine
  check(model_->move_block(pools_->pool.views(), here, open), ErrorKind::io,
        "the other tensor-parallel ranks could not open their host-RAM/SSD tiers (their log "
        "says why)");
}

void Engine::close_rank_tiers() {
  if (!rank_tiers_open_) return;
  rank_tiers_open_ = false;
  BlockMove close;
  close.op = BlockMove::Op::close;
  PoolBlockMover here(nullptr);
  try {
    model_->move_block(pools_->pool.views(), here, close);
  } catch (const std::exception& e) {
    log_warn("closing the other ranks' state tiers: ", e.what());
  }
}

// Engine thread (mutex_ held): it owns the device pool, so it measures what the pool already
// holds of the prompt, and the prefetcher reads only the blocks past that.
void Engine::hand_to_prefetcher(std::span<const int32_t> tokens) {
  const PrefixCache::DeviceCoverage on_device = pools_->cache->device_coverage(tokens);
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t blocks = n < 2 ? 0 : (n - 1) / options_.page_size;
  const bool hybrid = pools_->cache->hybrid();
  if (on_device.blocks == blocks && (!hybrid || on_device.checkpoint == blocks)) return;
  std::lock_guard<std::mutex> lock(prefetch_mutex_);
  if (prefetch_queue_.size() >= 64) return;
  prefetch_queue_.push_back(
      {std::vector<int32_t>(tokens.begin(), tokens.end()), on_device.blocks, on_device.checkpoint});
  prefetch_wake_.notify_one();
}

void Engine::prefetch_loop() {
  const bool hybrid = pools_->pool.spec().deltanet_layers > 0;
  for (;;) {
    PrefetchJob job;
    {
      std::unique_lock<std::mutex> lock(prefetch_mutex_);
      prefetch_wake_.wait(lock, [&] { return prefetch_stop_ || !prefetch_queue_.empty(); });
      if (prefetch_stop_) return;
      job = std::move(prefetch_queue_.front());
      prefetch_queue_.pop_front();
    }
    // Warm host RAM along the prompt's chain past what the device pool holds (as the engine
    // thread saw it when it handed the job over), through blocks in RAM or on the SSD, until a
    // block is found in no tier (the chain is broken there). Checkpoints no deeper than the
    // deepest device checkpoint are skipped too: a lookup resumes from the deepest one.
    for (const PrefixCache::BlockRef& b :
         PrefixCache::chain_blocks(job.tokens, options_.page_size, model_->fingerprint(), hybrid)) {
      const bool kv = b.kind == PrefixCache::kKindKv;
      if (b.block < (kv ? job.device_blocks : job.device_checkpoint)) continue;
      {
        std::lock_guard<std::mutex> lock(prefetch_mutex_);
        if (prefetch_stop_) return;
      }
      if (!pools_->host->prefetch(b.key, b.kind) && kv) break;
    }
  }
}

namespace {
void copy_ssd_stats(const SsdStoreStats& ss, EngineMetrics& m) {
  m.ssd_blocks = ss.blocks;
  m.ssd_bytes = ss.bytes;
  m.ssd_corrupt = ss.corrupt;
  m.ssd_hits = ss.hits;
  m.ssd_write_failures = ss.write_failures;
}
}  // namespace

EngineMetrics Engine::metrics() const {
  EngineMetrics m;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    m = metrics_;
  }
  // The tiers' own counters are read live: the prefetcher moves them while the scheduler
  // sleeps, and the SSD index is there before the first step.
  if (pools_->host) {
    const HostStoreStats hs = pools_->host->stats();
    m.host_blocks = hs.blocks;
    m.host_bytes = hs.bytes;
    m.host_hits = hs.hits;
    m.host_written_down = hs.written_down;
    m.host_prefetched = hs.prefetched;
  }
  if (pools_->ssd) copy_ssd_stats(pools_->ssd->stats(), m);
  return m;
}

// Copies the scheduler's and the tiers' counters into metrics_ (mutex_ held).
void Engine::refresh_metrics() {
  metrics_.running = static_cast<int64_t>(running_.size());
  metrics_.waiting = static_cast<int64_t>(waiting_.size());
  metrics_.kv_pages_used = pools_->pool.num_pages() - pools_->pool.free_pages();
  if (pools_->cache) {
    const PrefixCacheStats cs = pools_->cache->stats();
    metrics_.prefix_query_tokens = cs.query_tokens;
    metrics_.prefix_hit_tokens = cs.hit_tokens;
    metrics_.cache_nodes = cs.nodes;
    metrics_.cache_pages = cs.pages;
    metrics_.cache_checkpoints = cs.checkpoints;
    metrics_.device_hit_tokens = cs.device_hit_tokens;
    metrics_.ssd_hit_tokens = cs.ssd_hit_tokens;
    metrics_.spilled_bytes = cs.spilled_bytes;
    metrics_.restored_bytes = cs.restored_bytes;
    metrics_.restored_blocks = cs.restored_blocks;
    metrics_.restores_declined = cs.restores_declined;
    metrics_.restore_seconds = cs.restore_seconds;
  }
  if (pools_->ssd) copy_ssd_stats(pools_->ssd->stats(), metrics_);
}

}  // namespace hibana
