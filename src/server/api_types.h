// The seam between the HTTP server and the API adapters: a request's context (id, headers,
// whether the client is still there), the response an adapter returns (a whole body, or a
// stream produced piece by piece), and the encoder each API supplies for its SSE protocol.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/api_error.h"
#include "server/generation.h"

namespace hibana::server {

class ResponseStore;

struct RequestContext {
  std::string request_id;
  // A request header by (case-insensitive) name; "" when absent.
  std::function<std::string(const std::string&)> header = [](const std::string&) {
    return std::string();
  };
  // Whether the client has closed its connection.
  std::function<bool()> client_gone = [] { return false; };
  // The server's stored Responses API responses (null: none are kept).
  std::shared_ptr<ResponseStore> responses;
};

// A response body produced while the generation runs.
class StreamBody {
 public:
  virtual ~StreamBody() = default;
  // Appends the next bytes to `out`, waiting at most until `until` for them. Returns false
  // once the body is complete (`out` may still hold its last bytes).
  virtual bool next(std::string& out, SteadyClock::time_point until) = 0;
  // The client went away: stop generating.
  virtual void abandon() = 0;
};

struct ApiResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::unique_ptr<StreamBody> stream;  // set for SSE responses ("text/event-stream")
};

// An API's SSE protocol over the generation's updates.
class StreamEncoder {
 public:
  virtual ~StreamEncoder() = default;
  // Sent once the engine has produced its first event (so usage holds cached tokens).
  virtual std::string begin(const UsageTotals& usage) = 0;
  // One choice's new output; `result` is set when the update finishes the choice.
  virtual std::string update(const GenerationUpdate& update, const ChoiceResult* result) = 0;
  // Every choice finished.
  virtual std::string end(const std::vector<ChoiceResult>& results, const UsageTotals& usage) = 0;
  // The generation failed after the stream began.
  virtual std::string fail(const ApiError& error) = 0;
};

// A complete (non-streaming) response body.
using ResponseEncoder =
    std::function<std::string(const std::vector<ChoiceResult>&, const UsageTotals&)>;

// Runs a submitted generation to a response: the whole body (non-streaming) or an SSE stream.
// Waits for the engine's first event before answering, so failures before any output still get
// a proper HTTP status. Cancels the generation when the client goes away.
ApiResponse respond(std::unique_ptr<Generation> generation, bool stream,
                    std::unique_ptr<StreamEncoder> stream_encoder, ResponseEncoder encode,
                    const RequestContext& context);

}  // namespace hibana::server
