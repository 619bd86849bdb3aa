// Turns a logits row into a token: penalties, temperature, top-k, top-p, min-p, then a draw
// from a generator seeded per request, so the same seed gives the same tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/logits_summary.h"

namespace hibana {

struct SamplingParams {
  float temperature = 0.0f;         // 0: greedy
  int32_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // > 1 discourages tokens already in prompt or output
  float presence_penalty = 0.0f;    // OpenAI-style, over generated tokens
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  // Throws Error(invalid_argument) naming the first bad value.
  void validate() const;
  bool greedy() const { return temperature <= 0.0f || top_k == 1; }
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // `context` holds the prompt (for the repetition penalty); generated tokens are tracked by
  // accept().
  void set_prompt(std::span<const int32_t> prompt);
  int32_t sample(const float* logits, int64_t vocab);
  // The same draw from a summary of the row, or nullopt when it needs entries the summary does
  // not hold; the generator is then where it was, so that sample() on the whole row gives what
  // it would have. The summary must hold at least summary_entries() entries, with the sums
  // summary_temperature() asks for. A penalised sampler draws only from the summary of a row
  // its penalties were applied to (add_penalties, penalties_applied; nullopt otherwise).
  std::optional<int32_t> sample(const LogitsSummary& summary, int64_t vocab,
                                bool penalties_applied = false);
  bool penalised() const;
  // Appends a row of this sampler's penalties now (the tokens sample() would penalise and how):
  // applied to a logits row (penalise_rows), they give the values sample() draws from.
  void add_penalties(LogitsPenalties& out, int64_t vocab) const;
  int64_t summary_entries() const;
  float summary_temperature() const;
  void accept(int32_t token);
  const SamplingParams& params() const { return params_; }

 private:
  double uniform();
  // A draw from the tempered, cut distribution of `logits` (not greedy).
  int32_t draw(const float* logits, int64_t vocab);
  template <typename F>
  void for_each_penalty(int64_t vocab, F f) const;
  SamplingParams params_;
  uint64_t rng_;
  std::unordered_map<int32_t, int32_t> generated_;  // token -> count
  std::vector<int32_t> seen_;                       // distinct prompt + generated tokens
  std::vector<uint8_t> seen_mask_;
  std::vector<float> work_;
  std::vector<int32_t> idx_;    // candidate tokens (draw)
  std::vector<double> weight_;  // per token: exp((logit - max) / T) of candidates (draw)
};

// Index of the largest value (the lowest index among equals).
int32_t argmax(const float* v, int64_t n);

}  // namespace hibana
