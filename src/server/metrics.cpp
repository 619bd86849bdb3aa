#include "server/metrics.h"

#include <cmath>
#include <sstream>

#include "core/heap.h"

namespace hibana::server {

void HttpStats::count(int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++by_status_[status];
}

std::map<int, uint64_t> HttpStats::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return by_status_;
}

namespace {

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

class Writer {
 public:
  explicit Writer(std::string labels) : labels_(std::move(labels)) {}

  void metric(const char* name, const char* type, const char* help, double value,
              const std::string& extra_labels = {}) {
    header(name, type, help);
    sample(name, extra_labels, value);
  }

  void header(const char* name, const char* type, const char* help) {
    out_ << "# HELP " << name << ' ' << help << '\n' << "# TYPE " << name << ' ' << type << '\n';
  }

  void sample(const std::string& name, const std::string& extra_labels, double value) {
    std::string labels = labels_;
    if (!extra_labels.empty()) labels += (labels.empty() ? "" : ",") + extra_labels;
    out_ << name;
    if (!labels.empty()) out_ << '{' << labels << '}';
    out_ << ' ' << number(value) << '\n';
  }

  void histogram(const char* name, const char* help, const Histogram& h) {
    header(name, "histogram", help);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.counts.size(); ++i) {
      cumulative += h.counts[i];
      std::string le = i < h.bounds.size() ? number(h.bounds[i]) : "+Inf";
      sample(std::string(name) + "_bucket", "le=\"" + le + "\"", static_cast<double>(cumulative));
    }
    sample(std::string(name) + "_sum", {}, h.sum);
    sample(std::string(name) + "_count", {}, static_cast<double>(h.count));
  }

  std::string str() const { return out_.str(); }

 private:
  std::string labels_;
  std::ostringstream out_;
};

}  // namespace

std::string prometheus_text(const EngineMetrics* m, const std::string& model_name,
                            const std::map<int, uint64_t>& http_by_status) {
  Writer w(model_name.empty() ? std::string() : "model_name=\"" + escape_label(model_name) + "\"");
  if (m) {
    w.metric("hibana_requests_running", "gauge", "Requests being generated.",
             static_cast<double>(m->running));
    w.metric("hibana_requests_waiting", "gauge", "Requests queued for admission.",
             static_cast<double>(m->waiting));
    w.metric("hibana_requests_finished_total", "counter", "Requests the engine finished.",
             static_cast<double>(m->requests_finished));
    w.metric("hibana_prompt_tokens_total", "counter", "Prompt tokens prefilled.",
             static_cast<double>(m->prompt_tokens));
    w.metric("hibana_generation_tokens_total", "counter", "Tokens generated.",
             static_cast<double>(m->generation_tokens));
    w.metric("hibana_prefix_cache_queries_total", "counter",
             "Prompt tokens looked up in the prefix cache.",
             static_cast<double>(m->prefix_query_tokens));
    w.metric("hibana_prefix_cache_hits_total", "counter",
             "Prompt tokens whose state was reused from the prefix cache.",
             static_cast<double>(m->prefix_hit_tokens));
    w.metric("hibana_prefix_cache_device_hit_tokens_total", "counter",
             "Prompt tokens reused from state kept in device memory.",
             static_cast<double>(m->device_hit_tokens));
    w.metric("hibana_prefix_cache_ssd_hit_tokens_total", "counter",
             "Prompt tokens reused from state restored from below the device (host RAM or SSD).",
             static_cast<double>(m->ssd_hit_tokens));
    w.metric("hibana_prefix_cache_nodes", "gauge", "Blocks indexed by the prefix cache.",
             static_cast<double>(m->cache_nodes));
    w.metric("hibana_prefix_cache_pages", "gauge", "KV pages held by the prefix cache.",
             static_cast<double>(m->cache_pages));
    w.metric("hibana_prefix_cache_checkpoints", "gauge", "Recurrent-state checkpoints kept.",
             static_cast<double>(m->cache_checkpoints));
    w.metric("hibana_ssd_spilled_bytes_total", "counter",
             "Bytes the prefix cache wrote below the device (host RAM or SSD).",
             static_cast<double>(m->spilled_bytes));
    w.metric("hibana_ssd_restored_bytes_total", "counter",
             "Bytes restored into the device from host RAM or the SSD tier.",
             static_cast<double>(m->restored_bytes));
    w.metric("hibana_ssd_restored_blocks_total", "counter",
             "KV blocks restored into the device from host RAM or the SSD tier.",
             static_cast<double>(m->restored_blocks));
    w.metric("hibana_ssd_restores_declined_total", "counter",
             "Restores from host RAM or the SSD skipped because recomputing was cheaper.",
             static_cast<double>(m->restores_declined));
    w.metric("hibana_ssd_restore_seconds_total", "counter",
             "Time spent restoring blocks from host RAM or the SSD tier.",
             m->restore_seconds);
    w.metric("hibana_ssd_blocks", "gauge", "Blocks stored in the SSD tier.",
             static_cast<double>(m->ssd_blocks));
    w.metric("hibana_ssd_bytes", "gauge", "Bytes stored in the SSD tier.",
             static_cast<double>(m->ssd_bytes));
    w.metric("hibana_ssd_corrupt_blocks_total", "counter", "SSD blocks found damaged and dropped.",
             static_cast<double>(m->ssd_corrupt));
    w.metric("hibana_ssd_write_failures_total", "counter", "SSD block writes that failed.",
             static_cast<double>(m->ssd_write_failures));
    w.metric("hibana_ssd_hits_total", "counter", "Blocks read back from the SSD tier.",
             static_cast<double>(m->ssd_hits));
    w.metric("hibana_host_cache_blocks", "gauge", "Blocks held in the host-RAM tier.",
             static_cast<double>(m->host_blocks));
    w.metric("hibana_host_cache_bytes", "gauge", "Bytes held in the host-RAM tier.",
             static_cast<double>(m->host_bytes));
    w.metric("hibana_host_cache_hits_total", "counter", "Blocks restored from the host-RAM tier.",
             static_cast<double>(m->host_hits));
    w.metric("hibana_host_cache_prefetched_total", "counter",
             "Blocks read from the SSD into host RAM while their request waited.",
             static_cast<double>(m->host_prefetched));
    w.metric("hibana_host_cache_written_down_total", "counter",
             "Blocks the host-RAM tier wrote down to the SSD tier.",
             static_cast<double>(m->host_written_down));
    w.metric("hibana_preemptions_total", "counter", "Sequences preempted for memory.",
             static_cast<double>(m->preemptions));
    w.metric("hibana_engine_steps_total", "counter", "Forward passes run.",
             static_cast<double>(m->steps));
    w.metric("hibana_summary_draws_total", "counter",
             "Tokens drawn from a summary of their logits row (no whole row moved).",
             static_cast<double>(m->summary_draws));
    w.metric("hibana_whole_row_fetches_total", "counter",
             "Logits rows fetched whole because their summary did not decide the draw.",
             static_cast<double>(m->whole_row_fetches));
    w.metric("hibana_kv_cache_pages_used", "gauge", "KV cache pages in use.",
             static_cast<double>(m->kv_pages_used));
    w.metric("hibana_kv_cache_pages_total", "gauge", "KV cache pages in the pool.",
             static_cast<double>(m->kv_pages_total));
    w.metric("hibana_kv_cache_usage_ratio", "gauge", "Fraction of KV cache pages in use.",
             m->kv_pages_total > 0
                 ? static_cast<double>(m->kv_pages_used) / static_cast<double>(m->kv_pages_total)
                 : 0.0);
    w.header("hibana_memory_bytes", "gauge", "Memory held, by kind.");
    w.sample("hibana_memory_bytes", "kind=\"kv_cache\"", static_cast<double>(m->kv_bytes));
    w.sample("hibana_memory_bytes", "kind=\"recurrent_state\"",
             static_cast<double>(m->recurrent_bytes));
    w.sample("hibana_memory_bytes", "kind=\"weights\"", static_cast<double>(m->weight_bytes));
    // The process heap as its allocator counts it (live bytes), whatever RSS does.
    if (const int64_t heap = heap_bytes_in_use(); heap >= 0) {
      w.sample("hibana_memory_bytes", "kind=\"heap\"", static_cast<double>(heap));
    }
    w.histogram("hibana_time_to_first_token_seconds", "Time from arrival to the first token.",
                m->ttft);
    w.histogram("hibana_inter_token_latency_seconds", "Time between consecutive tokens.", m->itl);
    w.histogram("hibana_e2e_request_latency_seconds", "Time from arrival to the end.", m->e2e);
  }
  Writer http("");
  http.header("hibana_http_responses_total", "counter", "HTTP responses sent, by status.");
  for (const auto& [status, count] : http_by_status) {
    http.sample("hibana_http_responses_total", "status=\"" + std::to_string(status) + "\"",
                static_cast<double>(count));
  }
  return w.str() + http.str();
}

}  // namespace hibana::server
