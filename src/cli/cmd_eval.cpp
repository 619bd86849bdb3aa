// hibana eval: one forward pass over given ids; prints the argmax at every position and the
// full logits at the last one (what the golden tests compare against transformers).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_args.h"
#include "core/error.h"
#include "engine/generator.h"
#include "engine/sampler.h"

namespace hibana::cli {

namespace {
struct EvalArgs {
  ModelArgs model;
  std::string prompt_ids;
  bool json = false;
  bool exact = false;
};
}  // namespace

void add_eval_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand("eval", "run one forward pass and print logits");
  args->model.add_to(*cmd);
  cmd->add_option("--prompt-ids", args->prompt_ids, "token ids: 1,2,3")->required();
  cmd->add_flag("--json", args->json, "print one JSON object {argmax, last_logits}");
  cmd->add_flag("--exact", args->exact, "recurrent form for every DeltaNet token");
  cmd->callback([&action, args] {
    action = [args]() -> int {
      std::unique_ptr<Model> model = args->model.load();
      std::vector<int32_t> ids = parse_id_list(args->prompt_ids);
      const int64_t n = static_cast<int64_t>(ids.size());
      StatePool pool = make_pool_for(*model, n);
      SequenceState seq(pool);
      seq.reserve(n);
      SequenceInput in;
      in.tokens = ids;
      in.pages = seq.pages();
      in.slot = seq.slot();
      in.logits = LogitsMode::all;
      ForwardOptions fo;
      fo.gdn_mode = args->exact ? GdnMode::recurrent : GdnMode::aligned_chunks;
      ForwardOutput out;
      model->forward(std::span<const SequenceInput>(&in, 1), pool.views(), fo, out);
      std::vector<int32_t> am;
      for (int64_t r = 0; r < n; ++r) am.push_back(argmax(out.row(r), out.vocab));
      const float* last = out.row(n - 1);
      if (args->json) {
        nlohmann::json j;
        j["argmax"] = am;
        j["last_logits"] = std::vector<float>(last, last + out.vocab);
        std::string s = j.dump();
        std::printf("%s\n", s.c_str());
      } else {
        std::printf("argmax:");
        for (int32_t a : am) std::printf(" %d", a);
        std::printf("\nlast position: argmax %d logit %.6f\n", am.back(), last[am.back()]);
      }
      return 0;
    };
  });
}

}  // namespace hibana::cli
