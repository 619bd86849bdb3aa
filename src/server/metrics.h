// GET /metrics: the engine's counters, gauges and latency histograms, and the HTTP server's
// response counts, in the Prometheus text exposition format (version 0.0.4). Names start with
// "hibana_"; engine series carry a model_name label.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "engine/engine.h"

namespace hibana::server {

// Responses sent, by status code (thread-safe).
class HttpStats {
 public:
  void count(int status);
  std::map<int, uint64_t> snapshot() const;

 private:
  mutable std::mutex mutex_;
  std::map<int, uint64_t> by_status_;
};

std::string prometheus_text(const EngineMetrics* engine, const std::string& model_name,
                            const std::map<int, uint64_t>& http_by_status);

}  // namespace hibana::server
