// hibana tokenize / detokenize: text <-> token ids with a model's tokenizer, to check what the
// engine sees.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/model_args.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "tokenizer/tokenizer.h"

namespace hibana::cli {

namespace {

struct TokenizeArgs {
  std::string model;
  bool json = false;
  bool no_special = false;
  bool skip_special = false;
};

std::string read_stdin() {
  std::string text;
  char buffer[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), stdin)) > 0) text.append(buffer, n);
  if (std::ferror(stdin)) throw Error(ErrorKind::io, "cannot read standard input");
  return text;
}

// A model directory, a tokenizer directory or tokenizer.json, or ORG/NAME in the hub cache.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model) {
  if (model.empty()) return Tokenizer::load(default_model_dir());
  std::error_code ec;
  if (std::filesystem::exists(model, ec)) return Tokenizer::load(model);
  return Tokenizer::load(resolve_model_dir(model));
}

void add_model_option(CLI::App& cmd, TokenizeArgs& args) {
  cmd.add_option("-m,--model", args.model,
                 "model or tokenizer directory, tokenizer.json, or ORG/NAME "
                 "(default: the embedded model)");
}

int run_tokenize(const TokenizeArgs& args) {
  std::unique_ptr<Tokenizer> tok = load_tokenizer(args.model);
  const std::vector<int32_t> ids = tok->encode(read_stdin(), !args.no_special);
  std::string out = args.json ? "[" : "";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += args.json ? "," : " ";
    out += std::to_string(ids[i]);
  }
  out += args.json ? "]\n" : "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int run_detokenize(const TokenizeArgs& args) {
  std::string input = read_stdin();
  // A JSON array or ids separated by spaces, commas or newlines.
  bool any = false;
  for (char& c : input) {
    if (c == '[' || c == ']' || c == '\r') c = ' ';
    if (c != ' ' && c != ',' && c != '\n' && c != '\t') any = true;
  }
  if (!any) return 0;  // no ids: no text
  const std::vector<int32_t> ids = parse_id_list(input);
  std::unique_ptr<Tokenizer> tok = load_tokenizer(args.model);
  for (int32_t id : ids) {
    check(id < tok->vocab_size(), ErrorKind::invalid_argument,
          "token id " + std::to_string(id) + " is not below the vocabulary size " +
              std::to_string(tok->vocab_size()));
  }
  const std::string text = tok->decode(ids, args.skip_special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace

void add_tokenize_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd =
      app.add_subcommand("tokenize", "print the token ids of the UTF-8 text on standard input");
  add_model_option(*cmd, *args);
  cmd->add_flag("--json", args->json, "print the ids as a JSON array");
  cmd->add_flag("--no-special", args->no_special,
                "encode added tokens written in the text (<|im_start|>, <think>...) as text");
  cmd->callback([&action, args] { action = [args] { return run_tokenize(*args); }; });
}

void add_detokenize_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "detokenize", "print the text of the token ids on standard input (JSON array or list)");
  add_model_option(*cmd, *args);
  cmd->add_flag("--skip-special", args->skip_special, "leave out special tokens");
  cmd->callback([&action, args] { action = [args] { return run_detokenize(*args); }; });
}

}  // namespace hibana::cli
