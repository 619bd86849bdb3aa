#include "server/served_model.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "engine/json_constraint.h"
#include "engine/xml_call_recogniser.h"
#include "server/api_error.h"
#include "server/json_fields.h"

namespace hibana::server {

namespace {

Json read_json_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return Json();
  std::ostringstream s;
  s << in.rdbuf();
  Json j = Json::parse(s.str(), nullptr, false);
  return j.is_discarded() ? Json() : j;
}

// eos_token_id of config.json (or its text_config) and generation_config.json: an id or a list.
void read_eos(const Json& j, std::vector<int32_t>& out) {
  if (!j.is_object()) return;
  if (j.contains("text_config")) read_eos(j["text_config"], out);
  if (!j.contains("eos_token_id")) return;
  const Json& e = j["eos_token_id"];
  if (e.is_number_integer()) out.push_back(e.get<int32_t>());
  if (e.is_array()) {
    for (const Json& v : e) {
      if (v.is_number_integer()) out.push_back(v.get<int32_t>());
    }
  }
}

template <typename T>
void read_number(const Json& j, const char* key, std::optional<T>& out) {
  if (j.is_object() && j.contains(key) && j[key].is_number()) out = j[key].get<T>();
}

}  // namespace

SamplingDefaults read_sampling_defaults(const std::string& model_dir) {
  SamplingDefaults d;
  Json j = read_json_file(std::filesystem::path(model_dir) / "generation_config.json");
  // A config that says do_sample: false means greedy.
  if (j.is_object() && j.contains("do_sample") && j["do_sample"].is_boolean() &&
      !j["do_sample"].get<bool>()) {
    d.temperature = 0.0f;
    return d;
  }
  read_number(j, "temperature", d.temperature);
  read_number(j, "top_p", d.top_p);
  read_number(j, "top_k", d.top_k);
  read_number(j, "min_p", d.min_p);
  read_number(j, "repetition_penalty", d.repetition_penalty);
  return d;
}

std::unique_ptr<ServedModel> ServedModel::open(const std::string& dir,
                                               std::vector<std::string> names,
                                               std::shared_ptr<GenerationService> service) {
  auto m = std::make_unique<ServedModel>();
  m->names = std::move(names);
  m->dir = dir;
  m->service = std::move(service);
  m->tokenizer = Tokenizer::load(dir);
  TemplateInfo info = read_template_info(dir, *m->tokenizer);
  if (!info.source.empty()) m->prompts = std::make_unique<PromptBuilder>(m->tokenizer, info);
  m->defaults = read_sampling_defaults(dir);
  auto add_stop = [&](const std::string& token) {
    if (token.empty()) return;
    if (auto id = m->tokenizer->token_id(token)) m->stop_token_ids.push_back(*id);
  };
  add_stop(info.eos_token);
  if (info.source.find("<|im_end|>") != std::string::npos) add_stop("<|im_end|>");
  namespace fs = std::filesystem;
  read_eos(read_json_file(fs::path(dir) / "config.json"), m->end_token_ids);
  read_eos(read_json_file(fs::path(dir) / "generation_config.json"), m->end_token_ids);
  m->end_token_ids.insert(m->end_token_ids.end(), m->stop_token_ids.begin(),
                          m->stop_token_ids.end());
  auto bytes = std::make_shared<std::vector<std::string>>();
  bytes->reserve(static_cast<size_t>(m->tokenizer->vocab_size()));
  for (int64_t i = 0; i < m->tokenizer->vocab_size(); ++i) {
    bytes->push_back(m->tokenizer->token_bytes(static_cast<int32_t>(i)));
  }
  m->token_bytes = std::move(bytes);
  m->token_trie = std::make_shared<TokenTrie>(m->token_bytes);
  m->created = std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count();
  return m;
}

bool ServedModel::serves(std::string_view name) const {
  if (name.empty()) return true;
  for (const auto& n : names) {
    if (n == name) return true;
  }
  return false;
}

void ServedModel::check_model(std::string_view name) const {
  if (!serves(name)) {
    throw ApiError(404,
                   "The model '" + std::string(name) + "' does not exist. This server serves '" +
                       names.front() + "'.",
                   "model_not_found", "model");
  }
}

const PromptBuilder& ServedModel::chat() const {
  if (!prompts) {
    throw ApiError(400, "this model has no chat template; use /v1/completions with a prompt");
  }
  return *prompts;
}

GenerationPlan plan_generation(const ServedModel& model, const GenerationOptions& options,
                               std::vector<int32_t> prompt, PipelineOptions pipeline,
                               int64_t checkpoint_at, JsonOutput constraint,
                               std::shared_ptr<const JsonSchema> schema,
                               std::shared_ptr<const XmlCallSpec> xml_call) {
  const int64_t context = model.max_context();
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n == 0) throw ApiError(400, "the prompt is empty");
  if (n >= context) throw ApiError::context_length(n, context);
  for (int32_t t : prompt) {
    if (t < 0 || t >= model.tokenizer->vocab_size()) {
      throw ApiError(400, "token id " + std::to_string(t) + " is outside the vocabulary");
    }
  }

  GenerationPlan plan;
  ChoicePlan first;
  GenerationRequest& r = first.request;
  r.prompt = std::move(prompt);
  const int64_t room = context - n;
  const int64_t cap = model.max_output_tokens > 0 ? model.max_output_tokens : room;
  if (options.max_tokens && *options.max_tokens <= std::min(room, cap)) {
    r.max_tokens = *options.max_tokens;
  } else if (cap < room) {
    r.max_tokens = cap;  // the server's limit: an ordinary "length" finish
  } else {
    r.max_tokens = room;
    first.max_tokens_is_context_limit = true;
  }

  SamplingParams s = options.sampling;
  const SamplingDefaults& d = model.defaults;
  if (!options.has_temperature && d.temperature) s.temperature = *d.temperature;
  if (!options.has_top_p && d.top_p) s.top_p = *d.top_p;
  if (!options.has_top_k && d.top_k) s.top_k = *d.top_k;
  if (!options.has_min_p && d.min_p) s.min_p = *d.min_p;
  if (!options.has_repetition_penalty && d.repetition_penalty) {
    s.repetition_penalty = *d.repetition_penalty;
  }
  if (!options.has_seed) {
    std::random_device rd;
    s.seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  try {
    s.validate();
  } catch (const std::exception& e) {
    throw ApiError(400, e.what(), "invalid_value");
  }
  r.sampling = s;
  r.ignore_eos = options.ignore_eos;
  r.stop_token_ids = model.stop_token_ids;
  r.stop_token_ids.insert(r.stop_token_ids.end(), options.stop_token_ids.begin(),
                          options.stop_token_ids.end());
  r.logit_bias = options.logit_bias;
  r.top_logprobs = options.top_logprobs;
  r.conversation = options.conversation;
  r.checkpoint_at = checkpoint_at < n ? checkpoint_at : -1;
  for (int32_t id : options.stop_token_ids) {
    if (id < 0 || id >= model.tokenizer->vocab_size()) {
      throw invalid_field("stop_token_ids",
                          "id " + std::to_string(id) + " is outside the vocabulary");
    }
  }
  for (const auto& [id, bias] : options.logit_bias) {
    if (id < 0 || id >= model.tokenizer->vocab_size()) {
      throw invalid_field("logit_bias",
                          "token id " + std::to_string(id) + " is outside the vocabulary");
    }
  }

  plan.prompt_tokens = n;
  for (int i = 0; i < options.n; ++i) {
    ChoicePlan c = first;
    c.request.sampling.seed += static_cast<uint64_t>(i);
    if (xml_call) {
      c.request.processor =
          std::make_shared<XmlCallConstraint>(model.token_trie, model.end_token_ids, xml_call);
    } else if (constraint != JsonOutput::none) {
      c.request.processor = std::make_shared<JsonConstraint>(
          model.token_trie, model.end_token_ids,
          schema ? schema : JsonSchema::any(constraint == JsonOutput::object));
    }
    if (i > 0 && !c.request.conversation.empty()) {
      c.request.conversation += '#';
      c.request.conversation += std::to_string(i);
    }
    plan.choices.push_back(std::move(c));
  }
  for (const std::string& stop : options.stop) {
    if (!stop.empty()) pipeline.stops.push_back({stop, false});
  }
  pipeline.logprobs = options.top_logprobs >= 0;
  plan.pipeline = std::move(pipeline);
  return plan;
}

}  // namespace hibana::server
