#include "tokenizer/chat_template.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/mapped_file.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/context.h"
#include "tokenizer/jinja/json_value.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"

namespace hibana {

namespace jinja {

struct CompiledTemplate {
  std::string name;
  Body body;
};

namespace {

std::string located(const std::string& name, int line, const std::string& message) {
  return "chat template '" + name + "' line " + std::to_string(line) + ": " + message;
}

}  // namespace
}  // namespace jinja

ChatTemplate::ChatTemplate(std::shared_ptr<const jinja::CompiledTemplate> compiled)
    : compiled_(std::move(compiled)) {}

ChatTemplate ChatTemplate::compile(const std::string& source, const std::string& name) {
  auto compiled = std::make_shared<jinja::CompiledTemplate>();
  compiled->name = name;
  try {
    compiled->body = jinja::parse_template(jinja::lex_template(source));
  } catch (const jinja::TemplateSyntaxError& e) {
    throw Error(
        e.unsupported ? ErrorKind::unsupported : ErrorKind::invalid_argument,
        jinja::located(name, e.line,
                       e.unsupported ? std::string(e.what()) + " is not supported" : e.what()));
  }
  return ChatTemplate(std::move(compiled));
}

const std::string& ChatTemplate::name() const {
  return compiled_->name;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  using namespace jinja;
  check(context.is_object(), ErrorKind::invalid_argument,
        "chat template context must be a JSON object");
  auto globals = std::make_shared<Scope>();
  install_globals(*globals);
  auto root = std::make_shared<Scope>(globals);
  root->vars["tools"] = Value::none();
  root->vars["documents"] = Value::none();
  root->vars["add_generation_prompt"] = Value(false);
  for (auto it = context.begin(); it != context.end(); ++it)
    root->vars[it.key()] = value_from_json(it.value());
  Context ctx(root);
  std::string out;
  try {
    render_body(compiled_->body, ctx, out);
  } catch (const RenderError& e) {
    if (e.raised_by_template) throw Error(ErrorKind::invalid_argument, e.what());
    throw Error(ErrorKind::invalid_argument, located(compiled_->name, e.line, e.what()));
  }
  return out;
}

namespace {

std::string template_from_tokenizer_config(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::corrupt_data, path + ": " + e.what());
  }
  auto it = j.find("chat_template");
  if (it != j.end() && it->is_string()) return it->get<std::string>();
  if (it != j.end() && it->is_array()) {
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template")) {
        return entry["template"].get<std::string>();
      }
    }
  }
  return {};
}

}  // namespace

std::string read_chat_template(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(path)) {
    if (fs::path(path).extension() != ".json") return read_text_file(path);
    std::string source = template_from_tokenizer_config(path);
    if (source.empty()) throw Error(ErrorKind::not_found, "no chat_template in " + path);
    return source;
  }
  fs::path dir(path);
  if (fs::exists(dir / "chat_template.jinja"))
    return read_text_file((dir / "chat_template.jinja").string());
  fs::path config = dir / "tokenizer_config.json";
  if (fs::exists(config)) {
    std::string source = template_from_tokenizer_config(config.string());
    if (!source.empty()) return source;
  }
  throw Error(ErrorKind::not_found,
              "no chat template in " + path +
                  " (looked for chat_template.jinja and tokenizer_config.json)");
}

}  // namespace hibana
