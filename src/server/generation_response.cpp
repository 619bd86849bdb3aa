#include "server/api_types.h"

#include <chrono>

namespace hibana::server {

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(100);

ApiError choice_error(const ChoiceResult& r) {
  return ApiError(r.error_status, r.error);
}

class GenerationStream final : public StreamBody {
 public:
  GenerationStream(std::unique_ptr<Generation> gen, std::unique_ptr<StreamEncoder> encoder,
                   std::vector<GenerationUpdate> pending)
      : gen_(std::move(gen)), encoder_(std::move(encoder)), pending_(std::move(pending)) {}

  bool next(std::string& out, SteadyClock::time_point until) override {
    if (finished_) return false;
    std::vector<GenerationUpdate> updates;
    if (!begun_) {
      begun_ = true;
      out += encoder_->begin(gen_->usage());
      updates = std::move(pending_);
    } else {
      gen_->poll(updates, until);
    }
    for (const GenerationUpdate& u : updates) {
      const ChoiceResult* result = u.finished ? &gen_->result(u.choice) : nullptr;
      if (result && result->finish == FinishKind::error) {
        out += encoder_->fail(choice_error(*result));
        finished_ = true;
        gen_->cancel();
        return false;
      }
      out += encoder_->update(u, result);
    }
    if (gen_->done()) {
      out += encoder_->end(gen_->results(), gen_->usage());
      finished_ = true;
      return false;
    }
    return true;
  }

  void abandon() override { gen_->cancel(); }

 private:
  std::unique_ptr<Generation> gen_;
  std::unique_ptr<StreamEncoder> encoder_;
  std::vector<GenerationUpdate> pending_;
  bool begun_ = false;
  bool finished_ = false;
};

}  // namespace

ApiResponse respond(std::unique_ptr<Generation> gen, bool stream,
                    std::unique_ptr<StreamEncoder> stream_encoder, ResponseEncoder encode,
                    const RequestContext& context) {
  std::vector<GenerationUpdate> pending = gen->initial();
  // Until the first engine event (or the end, when not streaming): watch the client.
  while (stream ? !gen->started() : !gen->done()) {
    gen->poll(pending, SteadyClock::now() + kPollInterval);
    if ((stream ? !gen->started() : !gen->done()) && context.client_gone()) {
      gen->cancel();
      ApiResponse gone;
      gone.status = 499;  // nobody reads it
      return gone;
    }
  }
  if (!stream || gen->done()) {
    // A failure before any output still gets an HTTP error status. A stream that produced
    // output is sent as one, its failure the last event, however fast it all arrived.
    bool output = false;
    for (int i = 0; i < gen->n(); ++i) output = output || gen->result(i).completion_tokens > 0;
    for (int i = 0; i < gen->n(); ++i) {
      const ChoiceResult& r = gen->result(i);
      if (gen->done() && r.finish == FinishKind::error && !(stream && output)) {
        throw choice_error(r);
      }
    }
  }
  ApiResponse response;
  if (!stream) {
    response.body = encode(gen->results(), gen->usage());
    return response;
  }
  response.content_type = "text/event-stream";
  response.stream = std::make_unique<GenerationStream>(std::move(gen), std::move(stream_encoder),
                                                       std::move(pending));
  return response;
}

}  // namespace hibana::server
