// hibana perplexity: perplexity of a model on a text file (last line: the perplexity).
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/model_args.h"
#include "core/error.h"
#include "engine/perplexity.h"
#include "io/mapped_file.h"
#include "tokenizer/tokenizer.h"

namespace hibana::cli {

namespace {
struct PerplexityArgs {
  ModelArgs model;
  std::string text_file;
  int64_t window = 1024;
};
}  // namespace

void add_perplexity_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<PerplexityArgs>();
  CLI::App* cmd = app.add_subcommand("perplexity", "perplexity of a model on a text file");
  args->model.add_to(*cmd);
  cmd->add_option("--text-file", args->text_file, "UTF-8 text to score")->required();
  cmd->add_option("--window", args->window,
                  "tokens per window; windows do not overlap (default 1024)");
  cmd->callback([&action, args] {
    action = [args]() -> int {
      std::unique_ptr<Model> model = args->model.load();
      std::unique_ptr<Tokenizer> tok = Tokenizer::load(model->source());
      std::string text = read_text_file(args->text_file);
      std::vector<int32_t> ids = tok->encode(text);
      std::fprintf(stderr, "%s: %zu bytes, %zu tokens, windows of %lld\n", args->text_file.c_str(),
                   text.size(), ids.size(), static_cast<long long>(args->window));
      PerplexityResult r = perplexity(*model, ids, args->window, [](int64_t done, int64_t total) {
        std::fprintf(stderr, "\rwindow %lld/%lld", static_cast<long long>(done),
                     static_cast<long long>(total));
        if (done == total) std::fprintf(stderr, "\n");
      });
      std::printf("tokens scored: %lld in %lld windows\n", static_cast<long long>(r.tokens),
                  static_cast<long long>(r.windows));
      std::printf("mean negative log-likelihood: %.6f nats/token\n", r.mean_nll);
      std::printf("next-token top-1 accuracy: %.4f\n", r.next_token_accuracy);
      if (r.mtp_accuracy >= 0) {
        std::printf("MTP top-1 accuracy (token after next): %.4f\n", r.mtp_accuracy);
      }
      std::printf("perplexity: %.4f\n", r.perplexity);
      return 0;
    };
  });
}

}  // namespace hibana::cli
