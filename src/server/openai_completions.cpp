#include "server/openai_completions.h"

#include "server/json_fields.h"
#include "server/openai_common.h"
#include "server/request_options.h"

namespace hibana::server {

namespace {

struct CompletionInfo {
  std::string id;
  int64_t created = 0;
  std::string model;
  bool include_usage = false;
  bool logprobs = false;
  std::vector<std::string> echo;  // per choice: the prompt text to put first (echo: true)
};

std::vector<std::vector<int32_t>> read_prompts(const Json& body, const Tokenizer& tok,
                                               std::vector<std::string>& texts) {
  const Json* p = member(body, "prompt");
  if (!p) throw invalid_field("prompt", "is required");
  std::vector<std::vector<int32_t>> out;
  auto ids = [&](const Json& arr, const std::string& where) {
    std::vector<int32_t> v;
    for (const Json& t : arr) {
      if (!t.is_number_integer()) throw invalid_field(where, "expected token ids");
      v.push_back(t.get<int32_t>());
    }
    texts.push_back(tok.decode(v));
    return v;
  };
  if (p->is_string()) {
    texts.push_back(p->get<std::string>());
    out.push_back(tok.encode(texts.back(), true));
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
    out.push_back(ids(*p, "prompt"));
  } else if (p->is_array() && !p->empty()) {
    for (size_t i = 0; i < p->size(); ++i) {
      const Json& e = (*p)[i];
      const std::string where = "prompt[" + std::to_string(i) + "]";
      if (e.is_string()) {
        texts.push_back(e.get<std::string>());
        out.push_back(tok.encode(texts.back(), true));
      } else if (e.is_array()) {
        out.push_back(ids(e, where));
      } else {
        throw invalid_field(where, "expected a string or an array of token ids");
      }
    }
  } else {
    throw invalid_field("prompt", "expected a string, an array of strings or token ids");
  }
  if (out.size() > 64) throw invalid_field("prompt", "at most 64 prompts per request");
  return out;
}

Json completion_logprobs(const std::vector<LogprobEntry>& entries, size_t offset) {
  Json tokens = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
  for (const LogprobEntry& e : entries) {
    tokens.push_back(e.token);
    lps.push_back(e.logprob);
    Json top = Json::object();
    for (const LogprobEntry& t : e.top) top[t.token] = t.logprob;
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += e.token.size();
  }
  return Json{{"tokens", tokens},
              {"token_logprobs", lps},
              {"top_logprobs", tops},
              {"text_offset", offsets}};
}

Json base(const CompletionInfo& info) {
  Json j = Json::object();
  j["id"] = info.id;
  j["object"] = "text_completion";
  j["created"] = info.created;
  j["model"] = info.model;
  j["system_fingerprint"] = nullptr;
  return j;
}

class CompletionStreamEncoder final : public StreamEncoder {
 public:
  explicit CompletionStreamEncoder(CompletionInfo info)
      : info_(std::move(info)), offsets_(info_.echo.size(), 0) {}

  std::string begin(const UsageTotals&) override {
    std::string out;
    for (size_t i = 0; i < info_.echo.size(); ++i) {
      if (info_.echo[i].empty()) continue;
      out += chunk(static_cast<int>(i), info_.echo[i], nullptr, nullptr);
      offsets_[i] += info_.echo[i].size();
    }
    return out;
  }

  std::string update(const GenerationUpdate& u, const ChoiceResult* result) override {
    std::string out;
    const size_t i = static_cast<size_t>(u.choice);
    if (!u.delta.content.empty() || (info_.logprobs && !u.delta.logprobs.empty())) {
      Json lp = info_.logprobs ? completion_logprobs(u.delta.logprobs, offsets_[i]) : Json(nullptr);
      out += chunk(u.choice, u.delta.content, nullptr, std::move(lp));
      offsets_[i] += u.delta.content.size();
    }
    if (result) out += chunk(u.choice, "", openai_finish_reason(result->finish), nullptr);
    return out;
  }

  std::string end(const std::vector<ChoiceResult>&, const UsageTotals& usage) override {
    return openai_stream_end(base(info_), usage, info_.include_usage);
  }

  std::string fail(const ApiError& error) override { return openai_stream_fail(error); }

 private:
  std::string chunk(int index, const std::string& text, const char* finish, Json logprobs) {
    Json c = Json::object();
    c["index"] = index;
    c["text"] = text;
    c["logprobs"] = std::move(logprobs);
    c["finish_reason"] = finish ? Json(finish) : Json(nullptr);
    Json j = base(info_);
    j["choices"] = Json::array({std::move(c)});
    if (info_.include_usage) j["usage"] = nullptr;
    return openai_sse(j);
  }

  CompletionInfo info_;
  std::vector<size_t> offsets_;
};

std::string encode_completion(const CompletionInfo& info, const std::vector<ChoiceResult>& results,
                              const UsageTotals& usage) {
  Json choices = Json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const ChoiceResult& r = results[i];
    Json c = Json::object();
    c["index"] = i;
    c["text"] = info.echo[i] + r.output.content;
    c["logprobs"] =
        info.logprobs ? completion_logprobs(r.logprobs, info.echo[i].size()) : Json(nullptr);
    c["finish_reason"] = openai_finish_reason(r.finish);
    choices.push_back(std::move(c));
  }
  Json j = base(info);
  j["choices"] = std::move(choices);
  j["usage"] = openai_usage(usage);
  return dump(j);
}

}  // namespace

ApiResponse handle_completions(const ServedModel& model, const RequestContext& context,
                               std::string_view text) {
  Json body = parse_body(text);
  const std::string name = opt_string(body, "model", "").value_or("");
  model.check_model(name);
  std::vector<std::string> prompt_texts;
  std::vector<std::vector<int32_t>> prompts = read_prompts(body, *model.tokenizer, prompt_texts);

  GenerationOptions g;
  read_sampling(body, g);
  g.max_tokens = read_max_tokens(body, "max_tokens").value_or(16);
  g.n = read_n(body);
  if (auto best_of = opt_int(body, "best_of", ""); best_of && *best_of != g.n) {
    throw invalid_field("best_of", "is not supported (only best_of = n)");
  }
  if (auto suffix = opt_string(body, "suffix", ""); suffix && !suffix->empty()) {
    throw invalid_field("suffix", "is not supported");
  }
  g.stop = read_stop(body, "stop");
  g.logit_bias = read_logit_bias(body);
  auto logprobs = opt_int(body, "logprobs", "");
  if (logprobs && (*logprobs < 0 || *logprobs > 20)) {
    throw invalid_field("logprobs", "must be between 0 and 20");
  }
  g.top_logprobs = logprobs ? static_cast<int32_t>(*logprobs) : -1;
  const bool echo = opt_bool(body, "echo", "").value_or(false);
  if (echo && logprobs) throw invalid_field("echo", "is not supported together with logprobs");
  g.stream = opt_bool(body, "stream", "").value_or(false);
  if (const Json* so = opt_object(body, "stream_options", "")) {
    g.include_usage = opt_bool(*so, "include_usage", "stream_options").value_or(false);
  }
  g.conversation = conversation_key(context.header("X-Claude-Code-Session-Id"),
                                    opt_string(body, "user", "").value_or(""));

  PipelineOptions pipeline;
  pipeline.raw = true;
  GenerationPlan plan;
  CompletionInfo info;
  for (size_t p = 0; p < prompts.size(); ++p) {
    GenerationPlan one = plan_generation(model, g, std::move(prompts[p]), pipeline);
    plan.prompt_tokens += one.prompt_tokens;
    plan.pipeline = std::move(one.pipeline);
    for (ChoicePlan& c : one.choices) {
      plan.choices.push_back(std::move(c));
      info.echo.push_back(echo ? prompt_texts[p] : std::string());
    }
  }
  auto gen = std::make_unique<Generation>(*model.service, *model.tokenizer, std::move(plan));
  info.id = random_id("cmpl-");
  info.created = unix_now();
  info.model = name.empty() ? model.names.front() : name;
  info.include_usage = g.include_usage;
  info.logprobs = g.top_logprobs >= 0;
  return respond(
      std::move(gen), g.stream, std::make_unique<CompletionStreamEncoder>(info),
      [info](const std::vector<ChoiceResult>& results, const UsageTotals& usage) {
        return encode_completion(info, results, usage);
      },
      context);
}

}  // namespace hibana::server
