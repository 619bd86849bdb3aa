// The engine's request-side types (engine.h): finish reasons, latency histograms and the
// stream of events a request's client reads while the engine loop pushes them.
#include "engine/engine.h"

namespace hibana {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::none: return "none";
    case FinishReason::length: return "length";
    case FinishReason::stop: return "stop";
    case FinishReason::cancelled: return "cancelled";
    case FinishReason::deadline: return "deadline";
    case FinishReason::error: return "error";
  }
  return "none";
}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++count;
}

// ---- RequestStream ---------------------------------------------------------------------------

bool RequestStream::next(StreamEvent& event, SteadyClock::time_point until) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!ready_.wait_until(lock, until, [&] { return !events_.empty(); })) return false;
  event = std::move(events_.front());
  events_.pop_front();
  return true;
}

void RequestStream::push(StreamEvent event) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
}

RequestUsage RequestStream::usage() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return usage_;
}

void RequestStream::set_usage(const RequestUsage& u) {
  std::lock_guard<std::mutex> lock(mutex_);
  usage_ = u;
}

}  // namespace hibana
