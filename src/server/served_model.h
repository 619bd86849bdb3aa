// The model as the HTTP APIs see it: its names, tokenizer, chat template, sampling defaults
// and the engine that runs it; and the checks every generation request shares (model name,
// context length, defaults, seeds).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/token_trie.h"
#include "server/chat_request.h"
#include "server/generation.h"
#include "server/prompt_builder.h"

namespace hibana::server {

// generation_config.json's sampling settings: used when a request does not set them.
struct SamplingDefaults {
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int32_t> top_k;
};
SamplingDefaults read_sampling_defaults(const std::string& model_dir);

struct ServedModel {
  std::vector<std::string> names;  // the first is the one /v1/models lists first
  std::string dir;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::unique_ptr<PromptBuilder> prompts;  // null when the model has no chat template
  SamplingDefaults defaults;
  std::vector<int32_t> stop_token_ids;  // end-of-turn tokens besides the model's eos ids
  std::vector<int32_t> end_token_ids;   // all of them: the model's eos ids and the above
  // Each token's bytes, and the same as a trie, for JSON-constrained generation.
  std::shared_ptr<const std::vector<std::string>> token_bytes;
  std::shared_ptr<const TokenTrie> token_trie;
  std::shared_ptr<GenerationService> service;
  int64_t created = 0;  // unix seconds
  // Most tokens one choice may generate (0: up to the end of the context). Requests asking
  // for more, or giving no limit, are capped here and finish with "length".
  int64_t max_output_tokens = 0;

  // Loads tokenizer, template and defaults from `dir` (the engine is set by the caller).
  static std::unique_ptr<ServedModel> open(const std::string& dir, std::vector<std::string> names,
                                           std::shared_ptr<GenerationService> service);

  int64_t max_context() const { return service->max_context(); }
  // An empty name is accepted (the only model); other names must be one of `names`.
  bool serves(std::string_view name) const;
  // 404 (code "model_not_found") for a model this server does not serve.
  void check_model(std::string_view name) const;
  // The prompt builder, or a 400 when the model has no chat template.
  const PromptBuilder& chat() const;
};

// The engine requests for a prompt's n choices: context check (400 with both counts),
// max_tokens (up to the context's end when absent or larger, and at most the model's
// max_output_tokens when set), sampling defaults, a random seed
// unless one was given (choice i uses seed + i), stop strings and token ids. Choice i > 0 gets
// the conversation key "KEY#i". `checkpoint_at`, `constraint` and `schema` come from the
// PromptPlan (each choice gets its own JSON constraint; they share the compiled schema), and so
// does `xml_call` (a forced call in the XML form: each choice gets an XmlCallConstraint).
GenerationPlan plan_generation(const ServedModel& model, const GenerationOptions& options,
                               std::vector<int32_t> prompt, PipelineOptions pipeline,
                               int64_t checkpoint_at = -1, JsonOutput constraint = JsonOutput::none,
                               std::shared_ptr<const JsonSchema> schema = nullptr,
                               std::shared_ptr<const XmlCallSpec> xml_call = nullptr);

}  // namespace hibana::server
