// A GenerationService that plays scripted outputs instead of running a model: each submitted
// request receives the tokens of the next script's text (encoded with the real tokenizer, or
// given as ids), one every `token_interval`, then a finished event. Requests are recorded for
// assertions. A script may stall (never finish until cancelled) or fail.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "server/generation.h"
#include "tokenizer/tokenizer.h"

namespace hibana::test {

struct Script {
  std::string text;                          // encoded with parse_special = true
  std::vector<int32_t> tokens;               // used instead of text when non-empty
  FinishReason finish = FinishReason::stop;  // after the last token (length if max_tokens hit)
  std::string error;                         // for FinishReason::error
  bool stall = false;                        // after the tokens, wait for cancel
  int64_t cached_tokens = 0;
};

class FakeService final : public server::GenerationService {
 public:
  FakeService(std::shared_ptr<const Tokenizer> tokenizer, int64_t max_context = 4096)
      : tokenizer_(std::move(tokenizer)), max_context_(max_context) {}
  ~FakeService() override {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }

  void push_script(Script s) {
    std::lock_guard<std::mutex> lock(mutex_);
    scripts_.push_back(std::move(s));
  }
  void set_default(Script s) {
    std::lock_guard<std::mutex> lock(mutex_);
    default_ = std::move(s);
  }
  void set_overloaded(bool v) { overloaded_ = v; }
  std::chrono::milliseconds token_interval{1};

  std::shared_ptr<RequestStream> submit(GenerationRequest request) override {
    if (overloaded_) throw Error(ErrorKind::overloaded, "too many requests are waiting");
    Script s;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!scripts_.empty()) {
        s = std::move(scripts_.front());
        scripts_.pop_front();
      } else {
        s = default_;
      }
      requests_.push_back(request);
    }
    auto stream = std::make_shared<RequestStream>(++next_id_);
    std::vector<int32_t> tokens = s.tokens.empty() ? tokenizer_->encode(s.text, true) : s.tokens;
    ++active_;
    std::lock_guard<std::mutex> lock(mutex_);
    threads_.emplace_back([this, stream, tokens, s, request] {
      RequestUsage usage;
      usage.prompt_tokens = static_cast<int64_t>(request.prompt.size());
      usage.cached_tokens = s.cached_tokens;
      auto finish = [&](FinishReason r, const std::string& error = {}) {
        stream->set_usage(usage);
        StreamEvent ev;
        ev.kind = StreamEvent::Kind::finished;
        ev.finish = r;
        ev.error = error;
        stream->push(std::move(ev));
        --active_;
      };
      for (int32_t t : tokens) {
        std::this_thread::sleep_for(token_interval);
        if (stream->cancelled() || stop_) return finish(FinishReason::cancelled);
        StreamEvent ev;
        ev.token = t;
        ev.logprob = -0.5f;
        if (request.top_logprobs > 0) ev.top_logprobs.push_back({t, -0.5f});
        stream->push(std::move(ev));
        ++usage.completion_tokens;
        ++generated_;
        if (usage.completion_tokens >= request.max_tokens) return finish(FinishReason::length);
      }
      while (s.stall && !stream->cancelled() && !stop_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (stream->cancelled() || stop_) return finish(FinishReason::cancelled);
      if (s.finish == FinishReason::stop) ++usage.completion_tokens;  // the eos token
      finish(s.finish, s.error);
    });
    return stream;
  }

  int64_t max_context() const override { return max_context_; }
  EngineMetrics metrics() const override {
    EngineMetrics m;
    m.running = active_.load();
    m.generation_tokens = static_cast<uint64_t>(generated_.load());
    return m;
  }

  std::vector<GenerationRequest> requests() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return requests_;
  }
  int active() const { return active_.load(); }
  // Waits (up to 5 s) until no scripted request is running.
  bool wait_idle() const {
    for (int i = 0; i < 5000 && active_.load() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return active_.load() == 0;
  }

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  int64_t max_context_;
  mutable std::mutex mutex_;
  std::deque<Script> scripts_;
  Script default_ = [] {
    Script s;
    s.text = "Hello!";
    return s;
  }();
  std::vector<GenerationRequest> requests_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> overloaded_{false};
  std::atomic<int> active_{0};
  std::atomic<int64_t> generated_{0};
  std::atomic<uint64_t> next_id_{0};
};

}  // namespace hibana::test
