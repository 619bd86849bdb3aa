// Chat templates: the Jinja programs shipped with a model that turn a conversation into the
// prompt text. Rendering matches transformers' apply_chat_template (jinja2 in an immutable
// sandbox with trim_blocks and lstrip_blocks, its own tojson, raise_exception and
// strftime_now) byte for byte on the constructs real templates use.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace hibana {

namespace jinja {
struct CompiledTemplate;
}

class ChatTemplate {
 public:
  // Parses the template. A construct the engine does not implement (an unknown filter or
  // test, {% include %}, {% extends %}, {% do %}, ...) throws Error(unsupported) naming it and
  // its line; a malformed template throws Error(invalid_argument). `name` labels messages.
  static ChatTemplate compile(const std::string& source, const std::string& name);

  // `context` is an object of template variables: messages, tools, add_generation_prompt,
  // enable_thinking, bos_token, eos_token and any extra kwargs. As transformers does, tools
  // and documents are None and add_generation_prompt false when absent. Object keys keep
  // their order (tojson prints them in input order).
  // raise_exception(msg) throws Error(invalid_argument, msg); other failures while rendering
  // throw Error(invalid_argument) with the template name and line.
  std::string render(const nlohmann::ordered_json& context) const;

  const std::string& name() const;

 private:
  explicit ChatTemplate(std::shared_ptr<const jinja::CompiledTemplate> compiled);
  std::shared_ptr<const jinja::CompiledTemplate> compiled_;
};

// The chat template a model ships: `path` is a model directory (chat_template.jinja, else
// the "chat_template" of tokenizer_config.json: a string, or a list of {name, template} of
// which "default" is taken), a tokenizer_config.json, or a template file. Throws
// Error(not_found) when there is none.
std::string read_chat_template(const std::string& path);

}  // namespace hibana
