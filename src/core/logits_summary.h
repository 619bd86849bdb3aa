// A row of logits, summarised where it was computed so that a draw rarely needs the whole row
// on the host: the row's largest entries (value descending, the lower token first among
// equals), its maximum, and the sums of exp(l - max) and exp((l - max) / T) in double.
// Backend::logits_summary writes the packed form (summary_words per row, i32 words); unpack
// reads it back. summarise_row is the reference every backend must match (same candidates
// and order; sums within about 1e-7 relative).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace hibana {

struct LogitsSummary {
  float max = 0.0f;
  double sum1 = 0.0;         // sum of exp(l - max) (0 unless asked)
  double sumt = 0.0;         // sum of exp((l - max) / T) (0 unless asked)
  std::vector<float> value;  // the largest entries, descending
  std::vector<int32_t> id;   // their tokens
  // Log-probability of `token` (at temperature 1) when it is among the entries held; sum1
  // must have been asked for.
  bool logprob(int32_t token, float& out) const;
  // log of the sum of exp(l) over the row (sum1 must have been asked for).
  double lse() const;
};

// Packed: words 0-1 sum1, 2-3 sumt (doubles), 4 max (float), 5 count, 6-7 unused, then `k`
// values (float) and `k` ids.
constexpr int64_t summary_words(int64_t k) {
  return 8 + 2 * k;
}

// A sampler's penalties (engine/sampler.h), applied to logits rows before they are summarised so
// that penalised requests draw from summaries too: row r's listed tokens become
// penalised_logit(l, repetition[r], subtract[i]), the other entries stay as they are.
struct LogitsPenalties {
  std::vector<int64_t> offset = {0};  // [R + 1]: row r's entries are offset[r] .. offset[r + 1)
  std::vector<int32_t> token;         // distinct within a row, each below the vocabulary
  std::vector<float> subtract;
  std::vector<float> repetition;  // [R] (1: none)
  int64_t rows() const { return static_cast<int64_t>(repetition.size()); }
  // Appends a row with no entries yet (add entries with token/subtract push_backs, then close).
  void open_row(float repetition_penalty) { repetition.push_back(repetition_penalty); }
  void close_row() { offset.push_back(static_cast<int64_t>(token.size())); }
};

// The repetition penalty's transform (l / p above zero, l * p otherwise), then the subtraction
// of the presence and frequency terms: one rounding per operation, in this order, on every
// backend (the GPU's kernel uses the _rn intrinsics so nothing is contracted into an fma).
inline float penalised_logit(float l, float repetition, float subtract) {
  const float r = l > 0 ? l / repetition : l * repetition;
  return r - subtract;
}

// out = logits with the penalties of each row applied (host f32 rows [R, V]; out may be logits).
void penalise_rows(const Tensor& logits, const LogitsPenalties& p, Tensor out);
// What every backend's penalise_rows checks first: f32 rows of one shape, a row of penalties per
// logits row, every token below the vocabulary. Throws Error(internal).
void check_penalties(const Tensor& logits, const LogitsPenalties& p, const Tensor& out);

// `temperature` < 0: no sums; 0: sum1 only; > 0: both (sumt at 1 / temperature, in double).
void summarise_row(const float* row, int64_t vocab, float temperature, int64_t k, int32_t* out);
LogitsSummary unpack_summary(const int32_t* packed, int64_t k);
// summarise_row over the rows of host f32 logits [R, V] into i32 out [R, summary_words(k)].
void summarise_rows(const Tensor& logits, const std::vector<float>& temperature, int64_t k,
                    Tensor out);

}  // namespace hibana
