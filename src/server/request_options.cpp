#include "server/request_options.h"

#include <cmath>

namespace hibana::server {

namespace {

float read_float(const Json& body, const char* key, bool& present, float current) {
  auto v = opt_number(body, key, "");
  present = v.has_value();
  if (!v) return current;
  if (!std::isfinite(*v)) throw invalid_field(key, "must be a finite number");
  return static_cast<float>(*v);
}

}  // namespace

void read_sampling(const Json& body, GenerationOptions& o) {
  SamplingParams& s = o.sampling;
  bool present = false;
  s.temperature = read_float(body, "temperature", o.has_temperature, s.temperature);
  if (s.temperature < 0.0f) throw invalid_field("temperature", "must be >= 0");
  s.top_p = read_float(body, "top_p", o.has_top_p, s.top_p);
  if (o.has_top_p && !(s.top_p > 0.0f && s.top_p <= 1.0f)) {
    throw invalid_field("top_p", "must be in (0, 1]");
  }
  if (auto k = opt_int(body, "top_k", "")) {
    if (*k < -1) throw invalid_field("top_k", "must be >= -1 (-1 or 0: off)");
    s.top_k = static_cast<int32_t>(std::min<int64_t>(*k <= 0 ? 0 : *k, INT32_MAX));
    o.has_top_k = true;
  }
  s.min_p = read_float(body, "min_p", o.has_min_p, s.min_p);
  if (o.has_min_p && !(s.min_p >= 0.0f && s.min_p <= 1.0f)) {
    throw invalid_field("min_p", "must be in [0, 1]");
  }
  s.presence_penalty = read_float(body, "presence_penalty", present, s.presence_penalty);
  if (s.presence_penalty < -2.0f || s.presence_penalty > 2.0f) {
    throw invalid_field("presence_penalty", "must be in [-2, 2]");
  }
  s.frequency_penalty = read_float(body, "frequency_penalty", present, s.frequency_penalty);
  if (s.frequency_penalty < -2.0f || s.frequency_penalty > 2.0f) {
    throw invalid_field("frequency_penalty", "must be in [-2, 2]");
  }
  s.repetition_penalty =
      read_float(body, "repetition_penalty", o.has_repetition_penalty, s.repetition_penalty);
  if (!(s.repetition_penalty > 0.0f)) throw invalid_field("repetition_penalty", "must be > 0");
  if (auto seed = opt_int(body, "seed", "")) {
    s.seed = static_cast<uint64_t>(*seed);
    o.has_seed = true;
  }
  o.ignore_eos = opt_bool(body, "ignore_eos", "").value_or(false);
  if (const Json* ids = opt_array(body, "stop_token_ids", "")) {
    for (const Json& id : *ids) {
      if (!id.is_number_integer()) throw invalid_field("stop_token_ids", "expected integers");
      o.stop_token_ids.push_back(id.get<int32_t>());
    }
  }
}

std::vector<std::string> read_stop(const Json& body, const char* key) {
  std::vector<std::string> out;
  const Json* v = member(body, key);
  if (!v) return out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const Json& s : *v) {
      if (!s.is_string()) throw invalid_field(key, "expected a string or an array of strings");
      out.push_back(s.get<std::string>());
    }
  } else {
    throw invalid_field(key, "expected a string or an array of strings");
  }
  if (out.size() > 64) throw invalid_field(key, "at most 64 stop strings are supported");
  return out;
}

int read_n(const Json& body) {
  auto n = opt_int(body, "n", "");
  if (!n) return 1;
  if (*n < 1 || *n > 16) throw invalid_field("n", "must be between 1 and 16");
  return static_cast<int>(*n);
}

std::map<int32_t, float> read_logit_bias(const Json& body) {
  std::map<int32_t, float> out;
  const Json* v = opt_object(body, "logit_bias", "");
  if (!v) return out;
  for (const auto& [key, value] : v->items()) {
    char* end = nullptr;
    long id = std::strtol(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || id < 0 || id > INT32_MAX) {
      throw invalid_field("logit_bias", "'" + key + "' is not a token id");
    }
    if (!value.is_number()) throw invalid_field("logit_bias." + key, "expected a number");
    double b = value.get<double>();
    if (!(b >= -100.0 && b <= 100.0))
      throw invalid_field("logit_bias." + key, "must be in [-100, 100]");
    // -100 is a ban, as in OpenAI's API.
    out[static_cast<int32_t>(id)] = b <= -100.0 ? -INFINITY : static_cast<float>(b);
  }
  return out;
}

std::optional<int64_t> read_max_tokens(const Json& body, const char* key) {
  auto v = opt_int(body, key, "");
  if (v && *v <= 0) throw invalid_field(key, "must be positive");
  return v;
}

std::optional<bool> thinking_from_effort(const std::string& effort) {
  if (effort.empty()) return std::nullopt;
  return !(effort == "none" || effort == "minimal");
}

std::string conversation_key(const std::string& session_header, const std::string& fallback) {
  return session_header.empty() ? fallback : session_header;
}

}  // namespace hibana::server
