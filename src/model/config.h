// The parsed config.json of a supported architecture, with every default the reference
// implementation (transformers) applies made explicit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hibana {

enum class Arch { qwen3, qwen3_moe, qwen3_next, qwen3_5, qwen3_5_moe };
const char* arch_name(Arch a);

enum class MixerKind { attention, gated_deltanet };
enum class FfnKind { dense, moe };

struct ModelConfig {
  Arch arch = Arch::qwen3;
  std::string model_type;  // as written in config.json

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t intermediate_size = 0;  // dense MLP layers
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool zero_centred_norm = false;  // (1 + w) RMSNorm (Qwen3-Next, Qwen3.5)

  // Attention.
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  bool attention_bias = false;
  bool attention_output_gate = false;  // q_proj also yields a sigmoid gate per head
  double rope_theta = 10000.0;
  int64_t rotary_dim = 0;  // leading dims of each head that are rotated

  // Gated DeltaNet.
  int64_t linear_key_heads = 0;
  int64_t linear_value_heads = 0;
  int64_t linear_key_dim = 0;
  int64_t linear_value_dim = 0;
  int64_t linear_conv_kernel = 0;

  // MoE.
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  int64_t moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;  // 0: no shared expert
  bool norm_topk_prob = false;

  int64_t mtp_layers = 0;  // multi-token-prediction layers (Qwen3-Next, Qwen3.5)

  std::vector<MixerKind> mixers;  // per layer
  std::vector<FfnKind> ffns;      // per layer

  // FP8 checkpoints: [rows, cols] of a scale block, or {0, 0} for none.
  int64_t fp8_block_rows = 0;
  int64_t fp8_block_cols = 0;

  std::vector<int64_t> eos_token_ids;  // from config.json and generation_config.json

  int64_t num_attention_layers() const;
  int64_t num_deltanet_layers() const;
  int64_t gdn_conv_dim() const {
    return 2 * linear_key_heads * linear_key_dim + linear_value_heads * linear_value_dim;
  }
  bool has_deltanet() const { return num_deltanet_layers() > 0; }
};

// Parses config.json text. `source` names the file in error messages. Throws Error(unsupported)
// for architectures or options we do not implement and Error(invalid_argument) for bad values.
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);

// Adds eos ids from generation_config.json (which transformers' generate() uses).
void apply_generation_config(ModelConfig& config, const std::string& json_text,
                             const std::string& source);

}  // namespace hibana
