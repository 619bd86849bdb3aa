#include "server/generation.h"

#include <algorithm>

#include "core/error.h"
#include "server/api_error.h"

namespace hibana::server {

namespace {

class EngineService final : public GenerationService {
 public:
  explicit EngineService(std::shared_ptr<Engine> engine) : engine_(std::move(engine)) {}
  std::shared_ptr<RequestStream> submit(GenerationRequest request) override {
    return engine_->submit(std::move(request));
  }
  int64_t max_context() const override { return engine_->max_context(); }
  EngineMetrics metrics() const override { return engine_->metrics(); }

 private:
  std::shared_ptr<Engine> engine_;
};

void merge_delta(ChoiceDelta& into, ChoiceDelta&& d) {
  into.reasoning += d.reasoning;
  into.content += d.content;
  for (auto& t : d.tool_calls) into.tool_calls.push_back(std::move(t));
  for (auto& l : d.logprobs) into.logprobs.push_back(std::move(l));
}

}  // namespace

std::unique_ptr<GenerationService> make_engine_service(std::shared_ptr<Engine> engine) {
  return std::make_unique<EngineService>(std::move(engine));
}

struct Generation::Choice {
  std::shared_ptr<RequestStream> stream;
  std::shared_ptr<const LogitsProcessor> constraint;  // the request's, read once it finished
  OutputPipeline pipeline;
  ChoiceResult result;
  bool context_limited = false;
  bool done = false;
  bool engine_finished = false;
  Choice(const Tokenizer& tok, PipelineOptions o) : pipeline(tok, std::move(o)) {}
};

Generation::Generation(GenerationService& service, const Tokenizer& tokenizer, GenerationPlan plan)
    : prompt_tokens_(plan.prompt_tokens) {
  for (ChoicePlan& choice : plan.choices) {
    auto c = std::make_unique<Choice>(tokenizer, plan.pipeline);
    c->context_limited = choice.max_tokens_is_context_limit;
    c->constraint = choice.request.processor;
    try {
      c->stream = service.submit(std::move(choice.request));
    } catch (const std::exception& e) {
      cancel();  // the choices already queued
      throw to_api_error(e);
    }
    choices_.push_back(std::move(c));
  }
}

Generation::~Generation() {
  cancel();
}

void Generation::cancel() {
  for (auto& c : choices_) {
    if (c->stream && !c->engine_finished) c->stream->cancel();
  }
}

bool Generation::done() const {
  return std::all_of(choices_.begin(), choices_.end(), [](const auto& c) { return c->done; });
}

const ChoiceResult& Generation::result(int choice) const {
  return choices_[static_cast<size_t>(choice)]->result;
}

std::vector<ChoiceResult> Generation::results() const {
  std::vector<ChoiceResult> out;
  for (const auto& c : choices_) out.push_back(c->result);
  return out;
}

UsageTotals Generation::usage() const {
  UsageTotals u;
  u.prompt_tokens = prompt_tokens_;
  for (const auto& c : choices_) {
    const bool finished = c->done;
    u.completion_tokens += finished ? c->result.completion_tokens : c->pipeline.tokens();
    u.reasoning_tokens += c->pipeline.reasoning_tokens();
    if (c->stream) u.cached_tokens = std::max(u.cached_tokens, c->stream->usage().cached_tokens);
  }
  return u;
}

std::vector<GenerationUpdate> Generation::initial() {
  std::vector<GenerationUpdate> out;
  for (size_t i = 0; i < choices_.size(); ++i) {
    ChoiceDelta d = choices_[i]->pipeline.start();
    if (!d.empty()) out.push_back({static_cast<int>(i), std::move(d), false});
  }
  return out;
}

void Generation::finalize(Choice& c, FinishKind kind, const std::string& error) {
  const OutputPipeline& p = c.pipeline;
  c.result.output = p.result();
  c.result.logprobs = p.logprobs();
  c.result.reasoning_tokens = p.reasoning_tokens();
  c.result.error = error;
  if (kind == FinishKind::stop_sequence && p.matched_stop() && p.matched_stop()->keep) {
    kind = FinishKind::tool_calls;
  } else if (kind == FinishKind::stop_sequence && p.matched_stop()) {
    c.result.stop_sequence = p.matched_stop()->text;
  }
  if (kind == FinishKind::stop && !c.result.output.tool_calls.empty())
    kind = FinishKind::tool_calls;
  c.result.finish = kind;
  c.done = true;
}

bool Generation::handle(int index, StreamEvent& event, std::vector<GenerationUpdate>& updates) {
  Choice& c = *choices_[static_cast<size_t>(index)];
  started_ = true;
  if (c.done) return true;  // events after a stop string (before the engine noticed)
  GenerationUpdate u;
  u.choice = index;
  if (event.kind == StreamEvent::Kind::token) {
    u.delta = c.pipeline.push(event);
    if (c.pipeline.stopped()) {
      c.stream->cancel();
      merge_delta(u.delta, c.pipeline.finish());
      c.result.completion_tokens = c.pipeline.tokens();
      finalize(c, FinishKind::stop_sequence, {});
      u.finished = true;
    }
  } else {
    c.engine_finished = true;
    // A constrained document (a forced call, JSON output) cut short by max_tokens or the
    // context's end gets its closing, so that it always parses. (Only then: every token the
    // constraint took has reached the pipeline, which a stop token would not have.)
    const bool cut = event.finish == FinishReason::length && c.constraint;
    u.delta = c.pipeline.finish(event.finish == FinishReason::stop || cut,
                                cut ? c.constraint->closing() : std::string());
    c.result.completion_tokens = std::max(c.stream->usage().completion_tokens, c.pipeline.tokens());
    FinishKind kind = FinishKind::error;
    std::string error;
    switch (event.finish) {
      case FinishReason::stop:
        kind = FinishKind::stop;
        break;
      case FinishReason::length:
        kind = c.context_limited ? FinishKind::context_window : FinishKind::length;
        break;
      case FinishReason::cancelled:
        error = "the request was cancelled by the server";
        c.result.error_status = 503;
        break;
      case FinishReason::deadline:
        error = "the request ran past its deadline";
        c.result.error_status = 504;
        break;
      default:
        error = event.error.empty() ? "generation failed" : event.error;
        break;
    }
    finalize(c, kind, error);
    u.finished = true;
  }
  if (!u.delta.empty() || u.finished) updates.push_back(std::move(u));
  return true;
}

bool Generation::poll(std::vector<GenerationUpdate>& updates, SteadyClock::time_point until) {
  if (done()) return false;
  StreamEvent event;
  if (choices_.size() == 1) {
    if (!choices_[0]->stream->next(event, until)) return false;
    handle(0, event, updates);
    // Take whatever else is already queued without waiting.
    while (!choices_[0]->done && choices_[0]->stream->next(event, SteadyClock::now())) {
      handle(0, event, updates);
    }
    return true;
  }
  // Several choices: take what is ready from each, else wait briefly on one at a time.
  bool any = false;
  for (;;) {
    for (size_t k = 0; k < choices_.size(); ++k) {
      size_t i = (next_poll_ + k) % choices_.size();
      Choice& c = *choices_[i];
      if (c.done) continue;
      while (!c.done && c.stream->next(event, SteadyClock::now())) {
        handle(static_cast<int>(i), event, updates);
        any = true;
      }
    }
    if (any || done() || SteadyClock::now() >= until) return any;
    next_poll_ = (next_poll_ + 1) % choices_.size();
    Choice& c = *choices_[next_poll_];
    if (!c.done) {
      auto slice = std::min(until, SteadyClock::now() + std::chrono::milliseconds(2));
      if (c.stream->next(event, slice)) {
        handle(static_cast<int>(next_poll_), event, updates);
        any = true;
      }
    }
  }
}

}  // namespace hibana::server
