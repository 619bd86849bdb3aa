// hibana info: what a model is and what it costs to run.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/model_args.h"

namespace hibana::cli {

namespace {
const char* mixer_name(MixerKind k) {
  return k == MixerKind::attention ? "attention" : "gated_deltanet";
}
}  // namespace

void add_info_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<ModelArgs>();
  CLI::App* cmd = app.add_subcommand("info", "print a model's architecture and costs");
  args->add_to(*cmd);
  cmd->callback([&action, args] {
    action = [args]() -> int {
      std::unique_ptr<Model> model = args->load();
      const ModelConfig& c = model->config();
      std::printf("source: %s\n", model->source().c_str());
      std::printf("architecture: %s (model_type %s)\n", arch_name(c.arch), c.model_type.c_str());
      std::printf("layers: %lld (%lld attention, %lld gated deltanet)%s\n",
                  static_cast<long long>(c.num_layers),
                  static_cast<long long>(c.num_attention_layers()),
                  static_cast<long long>(c.num_deltanet_layers()),
                  model->has_mtp() ? " + 1 MTP layer" : "");
      std::printf("hidden %lld, vocab %lld, heads %lld q / %lld kv x %lld, rotary dims %lld, "
                  "rope theta %g\n",
                  static_cast<long long>(c.hidden_size), static_cast<long long>(c.vocab_size),
                  static_cast<long long>(c.num_heads), static_cast<long long>(c.num_kv_heads),
                  static_cast<long long>(c.head_dim), static_cast<long long>(c.rotary_dim),
                  c.rope_theta);
      if (c.has_deltanet()) {
        std::printf("deltanet: %lld key heads x %lld, %lld value heads x %lld, conv kernel %lld\n",
                    static_cast<long long>(c.linear_key_heads),
                    static_cast<long long>(c.linear_key_dim),
                    static_cast<long long>(c.linear_value_heads),
                    static_cast<long long>(c.linear_value_dim),
                    static_cast<long long>(c.linear_conv_kernel));
      }
      int64_t moe_layers = 0;
      for (FfnKind f : c.ffns) moe_layers += f == FfnKind::moe;
      if (moe_layers) {
        std::printf("moe: %lld layers, %lld experts, top-%lld, expert width %lld, shared %lld%s\n",
                    static_cast<long long>(moe_layers), static_cast<long long>(c.num_experts),
                    static_cast<long long>(c.experts_per_token),
                    static_cast<long long>(c.moe_intermediate_size),
                    static_cast<long long>(c.shared_expert_intermediate_size),
                    c.norm_topk_prob ? ", renormalised" : "");
      }
      std::printf("layer types:");
      for (size_t i = 0; i < c.mixers.size(); ++i) {
        std::printf(" %s%s", mixer_name(c.mixers[i]), c.ffns[i] == FfnKind::moe ? "+moe" : "");
      }
      std::printf("\n");
      const int64_t params = model->parameter_count();
      const size_t bytes = model->weights().matrix_bytes;
      std::printf("parameters: %lld (%.3f B)\n", static_cast<long long>(params), params / 1e9);
      std::printf("weight bytes: %zu (%.3f GB), %.2f bytes per weight\n", bytes, bytes / 1e9,
                  static_cast<double>(bytes) / static_cast<double>(params));
      std::printf("bytes read per decoded token (weights, batch 1): %zu (%.3f GB)\n",
                  model->bytes_per_token(), model->bytes_per_token() / 1e9);
      StateSpec s = model->state_spec();
      std::printf("state: %zu bytes of KV per token, %zu bytes of recurrent state per sequence\n",
                  s.kv_bytes_per_token(), s.recurrent_bytes_per_slot());
      std::printf("eos ids:");
      for (int64_t e : c.eos_token_ids) std::printf(" %lld", static_cast<long long>(e));
      std::printf("\n");
      return 0;
    };
  });
}

}  // namespace hibana::cli
