#include "model/config.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace hibana {

using json = nlohmann::json;

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::qwen3: return "qwen3";
    case Arch::qwen3_moe: return "qwen3_moe";
    case Arch::qwen3_next: return "qwen3_next";
    case Arch::qwen3_5: return "qwen3_5";
    case Arch::qwen3_5_moe: return "qwen3_5_moe";
  }
  return "?";
}

int64_t ModelConfig::num_attention_layers() const {
  return std::count(mixers.begin(), mixers.end(), MixerKind::attention);
}
int64_t ModelConfig::num_deltanet_layers() const {
  return std::count(mixers.begin(), mixers.end(), MixerKind::gated_deltanet);
}

namespace {

struct Reader {
  const json& j;
  const std::string& source;

  [[noreturn]] void fail(const std::string& key, const std::string& problem) const {
    throw Error(ErrorKind::invalid_argument, source + ": '" + key + "' " + problem);
  }
  bool has(const std::string& key) const { return j.contains(key) && !j[key].is_null(); }
  int64_t integer(const std::string& key) const {
    if (!has(key)) fail(key, "is missing");
    if (!j[key].is_number_integer()) fail(key, "is not an integer");
    return j[key].get<int64_t>();
  }
  int64_t integer(const std::string& key, int64_t fallback) const {
    return has(key) ? integer(key) : fallback;
  }
  int64_t positive(const std::string& key) const {
    int64_t v = integer(key);
    if (v <= 0) fail(key, "must be positive, got " + std::to_string(v));
    return v;
  }
  int64_t positive(const std::string& key, int64_t fallback) const {
    return has(key) ? positive(key) : fallback;
  }
  double number(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_number()) fail(key, "is not a number");
    return j[key].get<double>();
  }
  bool boolean(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_boolean()) fail(key, "is not true or false");
    return j[key].get<bool>();
  }
};

Arch arch_from(const json& top, const std::string& source) {
  std::string type = top.value("model_type", "");
  if (type == "qwen3") return Arch::qwen3;
  if (type == "qwen3_moe") return Arch::qwen3_moe;
  if (type == "qwen3_next") return Arch::qwen3_next;
  if (type == "qwen3_5" || type == "qwen3_5_text") return Arch::qwen3_5;
  if (type == "qwen3_5_moe" || type == "qwen3_5_moe_text") return Arch::qwen3_5_moe;
  std::string arch;
  if (top.contains("architectures") && top["architectures"].is_array() &&
      !top["architectures"].empty() && top["architectures"][0].is_string()) {
    arch = top["architectures"][0].get<std::string>();
  }
  throw Error(ErrorKind::unsupported,
              source + ": unsupported architecture (model_type '" + type + "'" +
                  (arch.empty() ? "" : ", " + arch) +
                  "); supported: qwen3, qwen3_moe, qwen3_next, qwen3_5, qwen3_5_moe");
}

void read_eos(const json& j, std::vector<int64_t>& out) {
  if (!j.contains("eos_token_id")) return;
  const json& e = j["eos_token_id"];
  auto add = [&](int64_t v) {
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  };
  if (e.is_number_integer()) add(e.get<int64_t>());
  if (e.is_array()) {
    for (const json& v : e) {
      if (v.is_number_integer()) add(v.get<int64_t>());
    }
  }
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  json top;
  try {
    top = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::invalid_argument, source + ": not valid JSON: " + e.what());
  }
  if (!top.is_object()) throw Error(ErrorKind::invalid_argument, source + ": not a JSON object");

  ModelConfig c;
  c.arch = arch_from(top, source);
  c.model_type = top.value("model_type", std::string(arch_name(c.arch)));
  const bool hybrid = c.arch == Arch::qwen3_next || c.arch == Arch::qwen3_5 ||
                      c.arch == Arch::qwen3_5_moe;

  // Qwen3.5 checkpoints nest the text model under text_config.
  const json* tj = &top;
  if (top.contains("text_config") && top["text_config"].is_object()) tj = &top["text_config"];
  Reader r{*tj, source};

  c.vocab_size = r.positive("vocab_size");
  c.hidden_size = r.positive("hidden_size");
  c.num_layers = r.positive("num_hidden_layers");
  c.num_heads = r.positive("num_attention_heads");
  c.num_kv_heads = r.positive("num_key_value_heads", c.num_heads);
  int64_t default_head_dim = c.arch == Arch::qwen3 ? 128
                             : hybrid              ? 256
                                                   : c.hidden_size / c.num_heads;
  c.head_dim = r.positive("head_dim", default_head_dim);
  c.rms_norm_eps = r.number("rms_norm_eps", 1e-6);
  c.max_position_embeddings = r.positive("max_position_embeddings", 32768);
  c.attention_bias = r.boolean("attention_bias", false);
  c.zero_centred_norm = hybrid;
  c.attention_output_gate = hybrid;
  // Tied embeddings: the text config's flag wins; Qwen3.5 also carries one at the top level.
  bool tie_top = Reader{top, source}.boolean("tie_word_embeddings", false);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", tie_top);
  if (c.num_heads % c.num_kv_heads != 0) {
    r.fail("num_attention_heads", "(" + std::to_string(c.num_heads) +
                                      ") is not a multiple of num_key_value_heads (" +
                                      std::to_string(c.num_kv_heads) + ")");
  }
  if (r.boolean("use_sliding_window", false)) {
    throw Error(ErrorKind::unsupported, source + ": sliding-window attention is not supported");
  }

  // RoPE: rope_parameters first, then the legacy top-level keys, then the family default.
  double partial = hybrid ? 0.25 : 1.0;
  c.rope_theta = r.number("rope_theta", 10000.0);
  if (r.has("partial_rotary_factor")) partial = r.number("partial_rotary_factor", partial);
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!r.has(key)) continue;
    const json& rp = (*tj)[key];
    if (!rp.is_object()) r.fail(key, "is not an object");
    std::string type = rp.value("rope_type", rp.value("type", std::string("default")));
    if (type != "default" && type != "mrope") {
      throw Error(ErrorKind::unsupported,
                  source + ": rope type '" + type + "' is not supported (only default rope)");
    }
    if (rp.contains("rope_theta") && rp["rope_theta"].is_number()) {
      c.rope_theta = rp["rope_theta"].get<double>();
    }
    if (rp.contains("partial_rotary_factor") && rp["partial_rotary_factor"].is_number()) {
      partial = rp["partial_rotary_factor"].get<double>();
    }
  }
  if (!(partial > 0.0 && partial <= 1.0)) r.fail("partial_rotary_factor", "must be in (0, 1]");
  c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * partial);
  if (c.rotary_dim % 2 != 0 || c.rotary_dim == 0) {
    r.fail("partial_rotary_factor", "gives an odd or empty rotary dimension");
  }

  // Which mixer each layer has.
  c.mixers.assign(c.num_layers, MixerKind::attention);
  if (hybrid) {
    if (r.has("layer_types")) {
      const json& lt = (*tj)["layer_types"];
      if (!lt.is_array() || static_cast<int64_t>(lt.size()) != c.num_layers) {
        r.fail("layer_types", "must list one type per layer (" + std::to_string(c.num_layers) + ")");
      }
      for (int64_t i = 0; i < c.num_layers; ++i) {
        std::string t = lt[i].is_string() ? lt[i].get<std::string>() : "";
        if (t == "linear_attention") {
          c.mixers[i] = MixerKind::gated_deltanet;
        } else if (t != "full_attention") {
          throw Error(ErrorKind::unsupported,
                      source + ": layer " + std::to_string(i) + " has unsupported type '" + t + "'");
        }
      }
    } else {
      int64_t interval = r.positive("full_attention_interval", 4);
      for (int64_t i = 0; i < c.num_layers; ++i) {
        c.mixers[i] = (i + 1) % interval == 0 ? MixerKind::attention : MixerKind::gated_deltanet;
      }
    }
    c.linear_key_heads = r.positive("linear_num_key_heads", 16);
    c.linear_value_heads = r.positive("linear_num_value_heads", 32);
    c.linear_key_dim = r.positive("linear_key_head_dim", 128);
    c.linear_value_dim = r.positive("linear_value_head_dim", 128);
    c.linear_conv_kernel = r.positive("linear_conv_kernel_dim", 4);
    if (c.linear_value_heads % c.linear_key_heads != 0) {
      r.fail("linear_num_value_heads", "is not a multiple of linear_num_key_heads");
    }
  } else if (r.has("layer_types")) {
    for (const json& t : (*tj)["layer_types"]) {
      if (!t.is_string() || t.get<std::string>() != "full_attention") {
        throw Error(ErrorKind::unsupported,
                    source + ": layer type " + t.dump() + " is not supported for " + c.model_type);
      }
    }
  }

  // Which FFN each layer has.
  c.ffns.assign(c.num_layers, FfnKind::dense);
  const bool moe_family = c.arch == Arch::qwen3_moe || c.arch == Arch::qwen3_next ||
                          c.arch == Arch::qwen3_5_moe;
  if (c.arch != Arch::qwen3_5_moe) c.intermediate_size = r.positive("intermediate_size");
  if (moe_family) {
    // transformers 5 saves Qwen3-MoE's count as num_local_experts; hub configs say num_experts.
    c.num_experts = r.integer("num_experts", r.integer("num_local_experts", 0));
    c.experts_per_token = r.integer("num_experts_per_tok", 0);
    c.moe_intermediate_size = r.integer("moe_intermediate_size", 0);
    if (c.arch == Arch::qwen3_5_moe) {
      c.norm_topk_prob = true;
      for (int64_t i = 0; i < c.num_layers; ++i) c.ffns[i] = FfnKind::moe;
    } else {
      c.norm_topk_prob = r.boolean("norm_topk_prob", c.arch == Arch::qwen3_next);
      int64_t step = r.positive("decoder_sparse_step", 1);
      std::vector<int64_t> mlp_only;
      if (r.has("mlp_only_layers")) {
        const json& m = (*tj)["mlp_only_layers"];
        if (!m.is_array()) r.fail("mlp_only_layers", "is not a list");
        for (const json& v : m) {
          if (!v.is_number_integer()) r.fail("mlp_only_layers", "holds a non-integer");
          mlp_only.push_back(v.get<int64_t>());
        }
      }
      for (int64_t i = 0; i < c.num_layers; ++i) {
        bool only = std::find(mlp_only.begin(), mlp_only.end(), i) != mlp_only.end();
        if (!only && c.num_experts > 0 && (i + 1) % step == 0) c.ffns[i] = FfnKind::moe;
      }
    }
    if (c.arch != Arch::qwen3_moe) {
      c.shared_expert_intermediate_size = r.integer("shared_expert_intermediate_size", 512);
    }
    bool any_moe = std::count(c.ffns.begin(), c.ffns.end(), FfnKind::moe) > 0;
    if (any_moe) {
      if (c.num_experts <= 0) r.fail("num_experts", "must be positive");
      if (c.experts_per_token <= 0 || c.experts_per_token > c.num_experts) {
        r.fail("num_experts_per_tok", "must be between 1 and num_experts");
      }
      if (c.moe_intermediate_size <= 0) r.fail("moe_intermediate_size", "must be positive");
    }
  }

  c.mtp_layers = r.integer("mtp_num_hidden_layers", r.integer("num_nextn_predict_layers", 0));

  // FP8 checkpoints (the block-scaled format Qwen and DeepSeek publish).
  if (top.contains("quantization_config") && top["quantization_config"].is_object()) {
    const json& q = top["quantization_config"];
    std::string method = q.value("quant_method", std::string());
    if (method != "fp8") {
      throw Error(ErrorKind::unsupported,
                  source + ": quantization method '" + method + "' is not supported (only fp8)");
    }
    if (q.contains("weight_block_size") && q["weight_block_size"].is_array() &&
        q["weight_block_size"].size() == 2) {
      c.fp8_block_rows = q["weight_block_size"][0].get<int64_t>();
      c.fp8_block_cols = q["weight_block_size"][1].get<int64_t>();
    }
  }

  read_eos(top, c.eos_token_ids);
  if (tj != &top) read_eos(*tj, c.eos_token_ids);
  return c;
}

void apply_generation_config(ModelConfig& config, const std::string& json_text,
                             const std::string& source) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::invalid_argument, source + ": not valid JSON: " + e.what());
  }
  if (j.is_object()) read_eos(j, config.eos_token_ids);
}

}  // namespace hibana
