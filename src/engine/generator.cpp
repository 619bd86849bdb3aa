#include "engine/generator.h"

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "engine/rank_tiers.h"

namespace hibana {

StatePool make_pool_for(const Model& model, int64_t max_positions, int64_t sequences,
                        int64_t page_size) {
  const int64_t pages_per_seq = (max_positions + page_size - 1) / page_size;
  return StatePool(model.state_spec(), page_size, std::max<int64_t>(1, pages_per_seq * sequences),
                   std::max<int64_t>(1, sequences));
}

void follow_rank0(const Model& model) {
  std::optional<StatePool> pool;
  StateGeometry made;
  FollowerTiers tiers(model);  // this rank's host-RAM and SSD tiers, as rank 0 opens them
  model.follow(
      [&](const StateGeometry& g) -> const StateViews& {
        if (!pool || !(g == made)) {
          pool.reset();
          pool.emplace(model.state_spec(), g.page_size, std::max<int64_t>(1, g.pages),
                       std::max<int64_t>(1, g.slots));
          made = g;
        }
        return pool->views();
      },
      &tiers);
}

std::vector<int32_t> generate(const Model& model, StatePool& pool, std::span<const int32_t> prompt,
                              const GenerateOptions& options,
                              const std::function<bool(int32_t)>& on_token) {
  check(!prompt.empty(), ErrorKind::invalid_argument, "the prompt is empty");
  const ModelConfig& cfg = model.config();
  for (int32_t t : prompt) {
    check(t >= 0 && t < cfg.vocab_size, ErrorKind::invalid_argument,
          "token id " + std::to_string(t) + " is outside the vocabulary (size " +
              std::to_string(cfg.vocab_size) + ")");
  }
  SequenceState seq(pool);
  Sampler sampler(options.sampling);
  sampler.set_prompt(prompt);
  const int64_t page = pool.page_size();
  const int64_t chunk = std::max(page, options.prefill_chunk / page * page);
  ForwardOptions fo;
  fo.gdn_mode = options.gdn_mode;
  ForwardOutput out;

  // Prefill: chunks end on page boundaries, the last one gives the logits of the prompt's end.
  const int64_t n = static_cast<int64_t>(prompt.size());
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t end = std::min(n, begin + chunk);
    seq.reserve(end);
    SequenceInput in;
    in.tokens = prompt.subspan(begin, end - begin);
    in.start_pos = begin;
    in.pages = seq.pages();
    in.slot = seq.slot();
    in.logits = end == n ? LogitsMode::last : LogitsMode::none;
    model.forward(std::span<const SequenceInput>(&in, 1), pool.views(), fo, out);
  }
  std::vector<int32_t> generated;
  int64_t pos = n;
  while (static_cast<int64_t>(generated.size()) < options.max_new_tokens) {
    int32_t token = sampler.sample(out.last(0), out.vocab);
    sampler.accept(token);
    generated.push_back(token);
    if (on_token && !on_token(token)) break;
    const bool eos = std::find(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end(), token) !=
                     cfg.eos_token_ids.end();
    if ((eos && options.stop_at_eos) ||
        static_cast<int64_t>(generated.size()) >= options.max_new_tokens) {
      break;
    }
    seq.reserve(pos + 1);
    SequenceInput in;
    in.tokens = std::span<const int32_t>(&generated.back(), 1);
    in.start_pos = pos;
    in.pages = seq.pages();
    in.slot = seq.slot();
    in.logits = LogitsMode::last;
    model.forward(std::span<const SequenceInput>(&in, 1), pool.views(), fo, out);
    ++pos;
  }
  return generated;
}

}  // namespace hibana
