#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/engine_pools.h"
#include "engine/kv_sizing.h"
#include "engine/logits_draw.h"
#include "engine/rank_tiers.h"
#include "state/state_pool.h"

namespace hibana {

// ---- Engine ----------------------------------------------------------------------------------

struct Engine::Sequence {
  uint64_t id = 0;
  GenerationRequest request;
  std::shared_ptr<RequestStream> stream;
  std::unique_ptr<Sampler> sampler;
  std::vector<int32_t> tokens;  // prompt, then every sampled token
  int64_t prompt_len = 0;
  int64_t computed = 0;  // leading tokens whose state is in the cache
  int64_t generated = 0;
  std::vector<int32_t> pages;
  int32_t slot = -1;
  SteadyClock::time_point arrived, first_token, last_token;
  bool started = false;          // has produced a token
  int64_t cached = 0;            // prompt tokens resumed from the prefix cache
  int64_t transient_blocks = 0;  // depth of this sequence's latest boundary checkpoint
  bool prefetch = false;         // waiting for the engine thread to hand it to the prefetcher
};

Engine::Engine(std::shared_ptr<const Model> model, const EngineOptions& options)
    : model_(std::move(model)), options_(options) {
  check(options_.page_size > 0 && options_.max_sequences > 0 && options_.step_token_budget > 0,
        ErrorKind::invalid_argument, "engine options must be positive");
  if (options_.prefill_token_budget < 0) {
    options_.prefill_token_budget =
        model_->backend().device() == Device::cuda ? kGpuPrefillTokens : 0;
  }
  options_.prefill_token_budget =
      std::max(options_.prefill_token_budget, options_.step_token_budget);
  const StateSpec spec = model_->state_spec();
  const int64_t page_bytes =
      std::max<int64_t>(1, static_cast<int64_t>(spec.kv_bytes_per_token()) * options_.page_size);
  const bool hybrid = spec.deltanet_layers > 0;
  const int64_t checkpoint_slots =
      options_.prefix_cache && hybrid ? std::max<int64_t>(0, options_.checkpoint_slots) : 0;
  if (options_.kv_cache_bytes == 0) {
    Backend& backend = model_->backend();
    const int64_t slots_bytes = static_cast<int64_t>(spec.recurrent_bytes_per_slot()) *
                                (options_.max_sequences + checkpoint_slots);
    const KvSizing sized =
        auto_kv_cache_bytes(backend.memory_info(), backend.unified_memory(), slots_bytes);
    options_.kv_cache_bytes = sized.bytes;
    log_info("engine: KV cache sized to ", sized.bytes >> 20, " MiB (", sized.why,
             "); --kv-cache-size sets it");
  }
  check(options_.kv_cache_bytes > 0, ErrorKind::invalid_argument,
        "the KV cache size must be positive (0: sized from the device's free memory)");
  const int64_t pages = std::max<int64_t>(2, options_.kv_cache_bytes / page_bytes);
  pools_ = std::make_unique<Pools>(spec, options_.page_size, pages,
                                   options_.max_sequences + checkpoint_slots);
  TierCosts costs;
  if (options_.prefix_cache && !options_.cache_dir.empty()) {
    SsdStoreOptions so;
    so.dir = rank_cache_dir(options_.cache_dir, model_->rank(), model_->ranks());
    so.capacity_bytes = static_cast<uint64_t>(options_.ssd_cache_bytes);
    so.model_fingerprint = model_->fingerprint();
    pools_->ssd = std::make_unique<SsdStore>(so);
  }
  if (options_.prefix_cache && options_.host_cache_bytes > 0) {
    if (model_->backend().unified_memory()) {
      log_info("host cache tier skipped: the GPU shares host memory (unified memory)");
    } else {
      pools_->host = std::make_unique<HostStore>(static_cast<uint64_t>(options_.host_cache_bytes),
                                                 pools_->ssd.get());
    }
  }
  open_rank_tiers();
  if (pools_->ssd) costs = measure_costs();
  if (options_.prefix_cache) {
    BlockStore* lower = pools_->host ? static_cast<BlockStore*>(pools_->host.get())
                                     : static_cast<BlockStore*>(pools_->ssd.get());
    pools_->cache = std::make_unique<PrefixCache>(pools_->pool, *model_, model_->fingerprint(),
                                                  checkpoint_slots, lower, costs);
  }
  check(options_.checkpoint_interval > 0 && options_.checkpoint_interval % options_.page_size == 0,
        ErrorKind::invalid_argument, "the checkpoint interval must be a multiple of the page size");
  max_context_ =
      options_.max_context > 0 ? options_.max_context : model_->config().max_position_embeddings;
  if (pages * options_.page_size < max_context_) {
    // The KV cache, not the model, sets the longest request: say so at start, with the size
    // that would hold one whole context, rather than only in each refused request.
    const double whole = static_cast<double>(max_context_) *
                         static_cast<double>(spec.kv_bytes_per_token()) / 1073741824.0;
    char size[32];
    std::snprintf(size, sizeof size, "%.1fGiB", std::ceil(whole * 10.0) / 10.0);
    log_warn("engine: the KV cache holds ", pages * options_.page_size,
             " tokens, fewer than the model's context of ", max_context_,
             ": longer requests are refused; --kv-cache-size ", size,
             " holds one whole context (more for several sequences)");
  }
  max_context_ = std::min(max_context_, pages * options_.page_size);
  metrics_.kv_pages_total = pages;
  metrics_.kv_bytes = pages * page_bytes;
  metrics_.recurrent_bytes =
      static_cast<int64_t>(spec.recurrent_bytes_per_slot()) * options_.max_sequences;
  metrics_.weight_bytes = static_cast<int64_t>(model_->weights().matrix_bytes);
  log_info("engine: ", pages, " KV pages of ", options_.page_size, " tokens (",
           metrics_.kv_bytes >> 20, " MiB), ", options_.max_sequences, " sequences, context ",
           max_context_, " tokens");
  worker_ = std::thread([this] { loop(); });
  if (prefetching()) prefetcher_ = std::thread([this] { prefetch_loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(prefetch_mutex_);
    prefetch_stop_ = true;
  }
  prefetch_wake_.notify_all();
  if (prefetcher_.joinable()) prefetcher_.join();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
  for (auto& s : running_) finish(*s, FinishReason::cancelled);
  running_.clear();
  for (auto& s : waiting_) finish(*s, FinishReason::cancelled);
  waiting_.clear();
  if (pools_->cache && pools_->ssd) {  // a restart finds it all on SSD
    try {  // with tensor parallelism the flush is moves on every rank: they may be gone
      pools_->cache->flush();
    } catch (const std::exception& e) {
      log_warn("flushing the prefix cache to the SSD tier: ", e.what());
    }
    if (pools_->host) pools_->host->flush();
  }
  close_rank_tiers();
}

std::shared_ptr<RequestStream> Engine::submit(GenerationRequest request) {
  const int64_t vocab = model_->config().vocab_size;
  check(!request.prompt.empty(), ErrorKind::invalid_argument, "the prompt is empty");
  for (int32_t t : request.prompt) {
    check(t >= 0 && t < vocab, ErrorKind::invalid_argument,
          "token id " + std::to_string(t) + " is outside the vocabulary");
  }
  const int64_t n = static_cast<int64_t>(request.prompt.size());
  if (n >= max_context_) {
    throw Error(ErrorKind::invalid_argument, "the prompt has " + std::to_string(n) +
                                                 " tokens but this model's context is " +
                                                 std::to_string(max_context_) + " tokens");
  }
  check(request.max_tokens > 0, ErrorKind::invalid_argument, "max_tokens must be positive");
  request.sampling.validate();
  auto seq = std::make_unique<Sequence>();
  seq->request = std::move(request);
  seq->sampler = std::make_unique<Sampler>(seq->request.sampling);
  seq->sampler->set_prompt(seq->request.prompt);
  seq->tokens = seq->request.prompt;
  seq->prompt_len = n;
  seq->arrived = SteadyClock::now();
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (static_cast<int64_t>(waiting_.size()) >= options_.max_queue) {
      throw Error(ErrorKind::overloaded,
                  "too many requests are waiting (" + std::to_string(waiting_.size()) + ")");
    }
    seq->id = next_id_++;
    stream = std::make_shared<RequestStream>(seq->id);
    seq->stream = stream;
    // The engine thread hands it to the prefetcher (admit_waiting(), even while admission is
    // held): only that thread can tell which of its blocks the device pool already holds.
    seq->prefetch = prefetching();
    prefetch_pending_ = prefetch_pending_ || seq->prefetch;
    waiting_.push_back(std::move(seq));
    metrics_.waiting = static_cast<int64_t>(waiting_.size());
  }
  wake_.notify_all();
  return stream;
}

void Engine::wait_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [&] { return waiting_.empty() && metrics_.running == 0; });
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] {
        return stop_ || (!held_ && !waiting_.empty()) || !running_.empty() || prefetch_pending_;
      });
      if (stop_) return;
    }
    try {
      step();
    } catch (const std::exception& e) {
      // A failure outside a forward pass: fail every running request rather than the server.
      log_error("engine step failed: ", e.what());
      for (auto& s : running_) finish(*s, FinishReason::error, e.what());
      running_.clear();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    refresh_metrics();
    if (running_.empty() && waiting_.empty()) idle_.notify_all();
  }
}

void Engine::release(Sequence& s) {
  // The full blocks computed so far go to the prefix cache (KV only: a checkpoint needs the
  // recurrent state at a page boundary, which the boundary policy in step() keeps).
  const int64_t blocks =
      std::min<int64_t>(s.computed / options_.page_size, static_cast<int64_t>(s.pages.size()));
  if (pools_->cache && blocks > 0) pools_->cache->insert(s.tokens, s.pages, blocks, -1);
  s.transient_blocks = 0;
  for (int32_t p : s.pages) pools_->pool.free_page(p);
  s.pages.clear();
  if (s.slot >= 0) pools_->pool.free_slot(s.slot);
  s.slot = -1;
  s.computed = 0;
}

void Engine::finish(Sequence& s, FinishReason reason, const std::string& error) {
  release(s);
  RequestUsage u;
  u.prompt_tokens = s.prompt_len;
  u.completion_tokens = s.generated;
  u.cached_tokens = s.cached;
  s.stream->set_usage(u);
  StreamEvent ev;
  ev.kind = StreamEvent::Kind::finished;
  ev.finish = reason;
  ev.error = error;
  s.stream->push(std::move(ev));
  std::lock_guard<std::mutex> lock(mutex_);
  ++metrics_.requests_finished;
  metrics_.e2e.observe(seconds_between(s.arrived, SteadyClock::now()));
}

bool Engine::ensure_pages(Sequence& s, int64_t positions) {
  StatePool& pool = pools_->pool;
  if (pool.spec().attention_layers == 0) return true;
  const int64_t need = (positions + pool.page_size() - 1) / pool.page_size();
  while (static_cast<int64_t>(s.pages.size()) < need) {
    if (pool.free_pages() == 0 &&
        (!pools_->cache ||
         pools_->cache->evict_pages(need - static_cast<int64_t>(s.pages.size())) == 0)) {
      return false;
    }
    s.pages.push_back(pool.alloc_page());
  }
  return true;
}

void Engine::hold_admission(bool hold) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    held_ = hold;
  }
  wake_.notify_all();
}

void Engine::admit_waiting() {
  StatePool& pool = pools_->pool;
  std::vector<std::pair<std::unique_ptr<Sequence>, FinishReason>> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto now = SteadyClock::now();
    // Cancelled and expired requests leave before they cost anything.
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      Sequence& s = **it;
      if (s.stream->cancelled() || (s.request.deadline && now > *s.request.deadline)) {
        dropped.emplace_back(std::move(*it), s.stream->cancelled() ? FinishReason::cancelled
                                                                   : FinishReason::deadline);
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
    // Admit in arrival order while a slot is free and the first prefill chunk's pages fit.
    const bool needs_slot = pool.spec().deltanet_layers > 0;
    while (!held_ && !waiting_.empty() &&
           static_cast<int64_t>(running_.size()) < options_.max_sequences) {
      Sequence& s = *waiting_.front();
      if (needs_slot && pool.free_slots() == 0) break;
      PrefixMatch match;
      if (pools_->cache) match = pools_->cache->lookup(s.tokens);
      const int64_t first_end = std::min<int64_t>(static_cast<int64_t>(s.tokens.size()),
                                                  match.tokens + options_.step_token_budget);
      const int64_t pages_needed = (first_end + pool.page_size() - 1) / pool.page_size() -
                                   static_cast<int64_t>(match.pages.size());
      const int64_t available =
          pool.free_pages() + (pools_->cache ? pools_->cache->evictable_pages() : 0);
      if (pool.spec().attention_layers > 0 && available < pages_needed) {
        for (int32_t p : match.pages) pool.free_page(p);
        break;
      }
      if (needs_slot) s.slot = pool.alloc_slot();
      if (match.tokens > 0) {
        s.pages = std::move(match.pages);
        s.computed = match.tokens;
        if (!s.started) s.cached = match.tokens;
        if (match.checkpoint_slot >= 0) {
          model_->copy_recurrent_slot(pool.views(), match.checkpoint_slot, s.slot);
        }
      }
      s.prefetch = false;
      RequestUsage u;  // known at admission, so a stream's first event can report it
      u.prompt_tokens = s.prompt_len;
      u.completion_tokens = s.generated;
      u.cached_tokens = s.cached;
      s.stream->set_usage(u);
      running_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
    }
    // Requests still waiting get their blocks below the device pool warmed in host RAM.
    if (prefetch_pending_) {
      for (auto& w : waiting_) {
        if (w->prefetch) hand_to_prefetcher(w->tokens);
        w->prefetch = false;
      }
      prefetch_pending_ = false;
    }
    metrics_.waiting = static_cast<int64_t>(waiting_.size());
  }
  for (auto& [seq, reason] : dropped) finish(*seq, reason);
}

void Engine::checkpoint_if_due(Sequence& s) {
  PrefixCache* cache = pools_->cache.get();
  const int64_t page = options_.page_size;
  const int64_t c = s.computed;
  if (!cache || c == 0 || c % page != 0) return;
  const int64_t blocks = c / page;
  if (!cache->hybrid()) return;  // KV alone resumes dense models: release() registers it
  const int64_t hint = s.request.checkpoint_at >= 0 ? s.request.checkpoint_at / page * page : -1;
  // Keep this sequence's latest page boundary (the end of its turn, when it finishes) and drop
  // its previous one, unless a kept checkpoint (checkpoint_at, the interval) is due here: it
  // is the latest boundary's checkpoint then.
  const bool kept = c == hint || c % options_.checkpoint_interval == 0;
  const int64_t previous = s.transient_blocks;
  cache->insert(s.tokens, s.pages, blocks, s.slot, !kept);
  s.transient_blocks = kept ? 0 : blocks;
  if (previous > 0 && previous != blocks) cache->drop_transient(s.tokens, previous);
}

void Engine::preempt_newest() {
  // The most recently admitted sequence gives its state back and is recomputed later (its
  // generated tokens are kept and become part of what it prefills).
  std::unique_ptr<Sequence> victim = std::move(running_.back());
  running_.pop_back();
  release(*victim);
  log_warn("KV cache full: preempting request ", victim->id, " (", victim->tokens.size(),
           " tokens) to recompute later");
  std::lock_guard<std::mutex> lock(mutex_);
  ++metrics_.preemptions;
  waiting_.push_front(std::move(victim));
}

bool Engine::step() {
  admit_waiting();
  const auto now = SteadyClock::now();
  // Cancelled or expired running requests leave before the pass (within one step).
  for (auto it = running_.begin(); it != running_.end();) {
    Sequence& s = **it;
    const bool cancelled = s.stream->cancelled();
    if (cancelled || (s.request.deadline && now > *s.request.deadline)) {
      finish(s, cancelled ? FinishReason::cancelled : FinishReason::deadline);
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  if (running_.empty()) return false;

  const int64_t page = options_.page_size;
  struct Planned {
    Sequence* seq;
    int64_t begin, count;
    bool wants_logits;
  };
  std::vector<Planned> plan;
  int64_t budget = options_.step_token_budget;
  // Decodes first: every sequence whose only uncomputed token is its last sampled one.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence& s = *running_[i];
    const int64_t len = static_cast<int64_t>(s.tokens.size());
    if (s.computed != len - 1 || !s.started) continue;
    while (!ensure_pages(s, len)) {
      if (running_.back().get() == &s || running_.size() <= 1) break;
      preempt_newest();
    }
    if (!ensure_pages(s, len)) continue;
    plan.push_back({&s, s.computed, 1, true});
    --budget;
  }
  // A pass without decode rows keeps nobody waiting: it may take the larger prefill budget.
  if (plan.empty()) budget = options_.prefill_token_budget;
  const size_t decodes = plan.size();
  // Then prefill chunks, in admission order, ending on page boundaries unless they finish the
  // prompt (so a prompt's passes split where a single pass would put chunk boundaries).
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence& s = *running_[i];
    const int64_t len = static_cast<int64_t>(s.tokens.size());
    const bool prefilling = s.computed < len - 1 || (!s.started && s.computed < len);
    if (!prefilling) continue;
    int64_t end = std::min(len, s.computed + budget);
    if (end < len) end = end / page * page;
    // Decodes may leave less than a page, which the alignment rounds to nothing for every
    // prompt until they end: the pass's first prefill chunk then takes a page.
    if (end <= s.computed && plan.size() == decodes) {
      end = std::min(len, s.computed / page * page + page);
    }
    if (end <= s.computed) continue;
    // End a chunk where the checkpoint policy wants the recurrent state.
    if (pools_->cache && pools_->cache->hybrid()) {
      const int64_t hint =
          s.request.checkpoint_at >= 0 ? s.request.checkpoint_at / page * page : -1;
      if (hint > s.computed && hint < end) end = hint;
      const int64_t every =
          (s.computed / options_.checkpoint_interval + 1) * options_.checkpoint_interval;
      if (every > s.computed && every < end) end = every;
      // And at the prompt's last page boundary, so the state there can be kept: the next turn
      // of an agent starts with this prompt and resumes from it.
      const int64_t last = (len - 1) / page * page;
      if (last > s.computed && last < end) end = last;
    }
    if (!ensure_pages(s, end)) {
      // Take what fits, page-aligned.
      int64_t have = static_cast<int64_t>(s.pages.size()) * page;
      end = std::min(end, have / page * page);
      if (end <= s.computed) continue;
    }
    const bool last = end == len;
    plan.push_back({&s, s.computed, end - s.computed, last});
    budget -= end - s.computed;
  }
  if (plan.empty()) {
    // Nothing can run: the cache is full of prefills. Preempt to make room.
    if (running_.size() > 1) {
      preempt_newest();
      return true;
    }
    finish(*running_.front(), FinishReason::error, "the KV cache is too small for this request");
    running_.clear();
    return true;
  }

  std::vector<SequenceInput> inputs(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    Sequence& s = *plan[i].seq;
    inputs[i].tokens = std::span<const int32_t>(s.tokens.data() + plan[i].begin, plan[i].count);
    inputs[i].start_pos = plan[i].begin;
    inputs[i].pages = s.pages;
    inputs[i].slot = s.slot;
    inputs[i].logits = plan[i].wants_logits ? LogitsMode::last : LogitsMode::none;
  }
  ForwardOptions fo;
  fo.gdn_mode = options_.gdn_mode;
  if (options_.sample_from_summaries) {
    std::vector<DrawRow> rows;
    for (const Planned& p : plan) {
      if (p.wants_logits) rows.push_back({&p.seq->request, p.seq->sampler.get()});
    }
    ask_summaries(rows, model_->config().vocab_size, fo);
  }
  ForwardOutput out;
  try {
    model_->forward(inputs, pools_->pool.views(), fo, out);
  } catch (const std::exception& e) {
    log_error("forward pass failed: ", e.what());
    for (const Planned& p : plan) p.seq->stream->cancel();
    for (auto it = running_.begin(); it != running_.end();) {
      if ((*it)->stream->cancelled()) {
        finish(**it, FinishReason::error, e.what());
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
    return true;
  }

  const ModelConfig& cfg = model_->config();
  const auto done = SteadyClock::now();
  uint64_t prompt_tokens = 0, generated_tokens = 0;
  std::vector<double> ttfts, itls;
  std::vector<Sequence*> finished_now;
  std::vector<FinishReason> reasons;
  // Each sequence's token (and its logprobs, when asked) depends on that sequence alone: they
  // are drawn on the pool's threads (a draw is a pass over the vocabulary), then accounted for
  // in order below.
  std::vector<size_t> sampled;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan[i].wants_logits) sampled.push_back(i);
  }
  std::vector<StreamEvent> drawn(plan.size());
  DrawCounts counts;
  auto draw = [&](int64_t j) {
    const size_t i = sampled[static_cast<size_t>(j)];
    Sequence& s = *plan[i].seq;
    drawn[i] = draw_token(s.request, *s.sampler, out, static_cast<int64_t>(i), counts);
  };
  if (sampled.size() > 1) {
    default_thread_pool().parallel_for(static_cast<int64_t>(sampled.size()), draw);
  } else if (!sampled.empty()) {
    draw(0);
  }
  for (size_t i = 0; i < plan.size(); ++i) {
    Sequence& s = *plan[i].seq;
    s.computed = plan[i].begin + plan[i].count;
    checkpoint_if_due(s);
    if (!plan[i].wants_logits) continue;
    const int32_t token = drawn[i].token;
    s.sampler->accept(token);
    if (s.request.processor) s.request.processor->accept(token);
    s.tokens.push_back(token);
    ++s.generated;
    ++generated_tokens;
    if (!s.started) {
      s.started = true;
      s.first_token = done;
      prompt_tokens += static_cast<uint64_t>(s.prompt_len);
      ttfts.push_back(seconds_between(s.arrived, done));
    } else {
      itls.push_back(seconds_between(s.last_token, done));
    }
    s.last_token = done;
    const bool eos = !s.request.ignore_eos &&
                     (std::find(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end(), token) !=
                          cfg.eos_token_ids.end() ||
                      std::find(s.request.stop_token_ids.begin(), s.request.stop_token_ids.end(),
                                token) != s.request.stop_token_ids.end());
    if (!eos) s.stream->push(std::move(drawn[i]));
    FinishReason reason = FinishReason::none;
    if (eos || (s.request.processor && s.request.processor->complete())) {
      reason = FinishReason::stop;
    } else if (s.generated >= s.request.max_tokens ||
               static_cast<int64_t>(s.tokens.size()) >= max_context_) {
      reason = FinishReason::length;
    }
    if (reason != FinishReason::none) {
      finished_now.push_back(&s);
      reasons.push_back(reason);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++metrics_.steps;
    metrics_.summary_draws += counts.summary;
    metrics_.whole_row_fetches += counts.fetched;
    metrics_.prompt_tokens += prompt_tokens;
    metrics_.generation_tokens += generated_tokens;
    if (!pools_->cache) metrics_.prefix_query_tokens += prompt_tokens;
    for (double t : ttfts) metrics_.ttft.observe(t);
    for (double t : itls) metrics_.itl.observe(t);
  }
  for (size_t i = 0; i < finished_now.size(); ++i) {
    Sequence* s = finished_now[i];
    finish(*s, reasons[i]);
    running_.erase(std::find_if(running_.begin(), running_.end(),
                                [&](const std::unique_ptr<Sequence>& p) { return p.get() == s; }));
  }
  return true;
}

}  // namespace hibana
