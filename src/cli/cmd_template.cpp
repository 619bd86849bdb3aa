// hibana template: render a model's chat template for a conversation, to check prompts.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "io/mapped_file.h"
#include "tokenizer/chat_template.h"

namespace hibana::cli {

namespace {

struct TemplateArgs {
  std::string model;
  std::string template_file;
  std::string messages;
  std::string tools;
  std::string kwargs;
  bool no_thinking = false;
  bool no_generation_prompt = false;
};

nlohmann::ordered_json read_json(const std::string& path, const char* what) {
  try {
    return nlohmann::ordered_json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::invalid_argument, std::string(what) + " " + path + ": " + e.what());
  }
}

// bos_token / eos_token as transformers passes them: strings from tokenizer_config.json.
void add_special_tokens(const std::string& model_dir, nlohmann::ordered_json& context) {
  std::filesystem::path config = std::filesystem::path(model_dir) / "tokenizer_config.json";
  if (!std::filesystem::exists(config)) return;
  nlohmann::ordered_json j = read_json(config.string(), "tokenizer config");
  for (const char* key : {"bos_token", "eos_token", "pad_token", "unk_token"}) {
    if (context.contains(key) || !j.contains(key)) continue;
    const auto& v = j[key];
    if (v.is_string()) context[key] = v;
    if (v.is_object() && v.contains("content")) context[key] = v["content"];
  }
}

int run_template(const TemplateArgs& args) {
  check(!args.model.empty() || !args.template_file.empty(), ErrorKind::invalid_argument,
        "give --model or --template");
  std::string source =
      read_chat_template(args.template_file.empty() ? args.model : args.template_file);
  ChatTemplate tmpl =
      ChatTemplate::compile(source, args.template_file.empty() ? args.model : args.template_file);

  nlohmann::ordered_json input = read_json(args.messages, "messages file");
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  if (input.is_array()) {
    context["messages"] = input;
  } else if (input.is_object() && input.contains("messages")) {
    context = input;  // a request-like object: messages, tools, kwargs...
  } else {
    throw Error(ErrorKind::invalid_argument,
                "messages file must hold a list of messages or an object with \"messages\"");
  }
  if (!args.tools.empty()) context["tools"] = read_json(args.tools, "tools file");
  if (!args.kwargs.empty()) {
    nlohmann::ordered_json extra = nlohmann::ordered_json::parse(args.kwargs, nullptr, false);
    check(extra.is_object(), ErrorKind::invalid_argument, "--kwargs must be a JSON object");
    for (auto it = extra.begin(); it != extra.end(); ++it) context[it.key()] = it.value();
  }
  if (!context.contains("add_generation_prompt")) {
    context["add_generation_prompt"] = !args.no_generation_prompt;
  }
  if (args.no_thinking) context["enable_thinking"] = false;
  if (!args.model.empty() && std::filesystem::is_directory(args.model)) {
    add_special_tokens(args.model, context);
  }
  std::string prompt = tmpl.render(context);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  return 0;
}

}  // namespace

void add_template_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<TemplateArgs>();
  CLI::App* cmd = app.add_subcommand("template", "render a chat template for a conversation");
  cmd->add_option("--model", args->model,
                  "model directory (chat_template.jinja or tokenizer_config.json)");
  cmd->add_option("--template", args->template_file, "a chat template file to use instead");
  cmd->add_option("--messages", args->messages,
                  "JSON file: a list of messages, or an object with messages, tools, kwargs")
      ->required();
  cmd->add_option("--tools", args->tools, "JSON file with the list of tools");
  cmd->add_option("--kwargs", args->kwargs, "extra template variables as a JSON object");
  cmd->add_flag("--no-thinking", args->no_thinking, "pass enable_thinking=false");
  cmd->add_flag("--no-generation-prompt", args->no_generation_prompt,
                "leave out the assistant generation prompt");
  cmd->callback([&action, args] { action = [args] { return run_template(*args); }; });
}

}  // namespace hibana::cli
