// One API request's generation: n choices submitted to the engine, each read through its own
// OutputPipeline. The HTTP layer polls it (so it can watch the client at the same time) and
// hands the updates to an API's encoder; the destructor cancels whatever still runs, so a
// request that is abandoned for any reason frees its engine state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/output_pipeline.h"

namespace hibana::server {

// What the server needs from the engine (tests substitute a scripted one).
class GenerationService {
 public:
  virtual ~GenerationService() = default;
  // Throws Error(overloaded) when the queue is full, Error(invalid_argument) for bad input.
  virtual std::shared_ptr<RequestStream> submit(GenerationRequest request) = 0;
  virtual int64_t max_context() const = 0;
  virtual EngineMetrics metrics() const = 0;
};

std::unique_ptr<GenerationService> make_engine_service(std::shared_ptr<Engine> engine);

enum class FinishKind {
  stop,            // end of turn (eos)
  length,          // max_tokens
  context_window,  // the context ran out before max_tokens
  stop_sequence,   // a stop string matched
  tool_calls,      // ended with tool calls
  error,           // the engine failed or dropped the request
};

struct ChoiceResult {
  ParsedOutput output;
  FinishKind finish = FinishKind::stop;
  std::string stop_sequence;
  std::vector<LogprobEntry> logprobs;
  int64_t completion_tokens = 0;
  int64_t reasoning_tokens = 0;
  std::string error;       // FinishKind::error
  int error_status = 500;  // 503 when the server dropped the request, 504 past its deadline
};

struct UsageTotals {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t reasoning_tokens = 0;
};

struct ChoicePlan {
  GenerationRequest request;
  bool max_tokens_is_context_limit = false;  // a "length" finish means the context ran out
};

struct GenerationPlan {
  std::vector<ChoicePlan> choices;
  int64_t prompt_tokens = 0;  // counted once per distinct prompt
  PipelineOptions pipeline;
};

struct GenerationUpdate {
  int choice = 0;
  ChoiceDelta delta;
  bool finished = false;  // the choice ended: result(choice) is final
};

class Generation {
 public:
  // Submits every choice; throws ApiError (429 when the engine's queue is full, 400 for what
  // the engine refuses).
  Generation(GenerationService& service, const Tokenizer& tokenizer, GenerationPlan plan);
  ~Generation();
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Output the prompt already holds (a forced tool call's name), before any token.
  std::vector<GenerationUpdate> initial();
  // Waits until `until` for engine events and appends what they produced. Returns whether
  // any event arrived.
  bool poll(std::vector<GenerationUpdate>& updates, SteadyClock::time_point until);

  bool started() const { return started_; }  // some engine event arrived
  bool done() const;
  void cancel();  // the client went away

  int n() const { return static_cast<int>(choices_.size()); }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  const ChoiceResult& result(int choice) const;
  std::vector<ChoiceResult> results() const;
  UsageTotals usage() const;

 private:
  struct Choice;
  bool handle(int index, StreamEvent& event, std::vector<GenerationUpdate>& updates);
  void finalize(Choice& c, FinishKind kind, const std::string& error);

  std::vector<std::unique_ptr<Choice>> choices_;
  int64_t prompt_tokens_ = 0;
  bool started_ = false;
  size_t next_poll_ = 0;
};

}  // namespace hibana::server
