#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace hibana {

void SamplingParams::validate() const {
  auto bad = [](const char* what, const std::string& why) {
    throw Error(ErrorKind::invalid_argument, std::string(what) + " " + why);
  };
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) bad("temperature", "must be >= 0");
  if (top_k < 0) bad("top_k", "must be >= 0");
  if (!(top_p > 0.0f && top_p <= 1.0f)) bad("top_p", "must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) bad("min_p", "must be in [0, 1]");
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    bad("repetition_penalty", "must be > 0");
  }
  if (!std::isfinite(presence_penalty) || presence_penalty < -2.0f || presence_penalty > 2.0f) {
    bad("presence_penalty", "must be in [-2, 2]");
  }
  if (!std::isfinite(frequency_penalty) || frequency_penalty < -2.0f || frequency_penalty > 2.0f) {
    bad("frequency_penalty", "must be in [-2, 2]");
  }
}

int32_t argmax(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (v[i] > v[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  params_.validate();
  rng_ = params.seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
}

void Sampler::set_prompt(std::span<const int32_t> prompt) {
  for (int32_t t : prompt) {
    if (t < 0) continue;
    if (static_cast<size_t>(t) >= seen_mask_.size()) seen_mask_.resize(t + 1, 0);
    if (!seen_mask_[t]) {
      seen_mask_[t] = 1;
      seen_.push_back(t);
    }
  }
}

void Sampler::accept(int32_t token) {
  ++generated_[token];
  set_prompt(std::span<const int32_t>(&token, 1));
}

double Sampler::uniform() {
  uint64_t z = (rng_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

// Calls f(token, subtract) once per token the penalties change (below `vocab`): every seen one
// with a repetition penalty, else the generated ones; subtract is the presence and frequency
// terms of a generated token (0 for the others).
template <typename F>
void Sampler::for_each_penalty(int64_t vocab, F f) const {
  const SamplingParams& p = params_;
  auto subtract = [&](int32_t count) {
    return p.presence_penalty + p.frequency_penalty * static_cast<float>(count);
  };
  if (p.repetition_penalty != 1.0f) {
    for (int32_t t : seen_) {
      if (t >= vocab) continue;
      const auto g = generated_.find(t);
      f(t, g == generated_.end() ? 0.0f : subtract(g->second));
    }
    return;
  }
  if (p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f) return;
  for (const auto& [t, count] : generated_) {
    if (t < vocab) f(t, subtract(count));
  }
}

void Sampler::add_penalties(LogitsPenalties& out, int64_t vocab) const {
  out.open_row(params_.repetition_penalty);
  for_each_penalty(vocab, [&](int32_t t, float subtract) {
    out.token.push_back(t);
    out.subtract.push_back(subtract);
  });
  out.close_row();
}

bool Sampler::penalised() const {
  const SamplingParams& p = params_;
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

int32_t Sampler::sample(const float* logits, int64_t vocab) {
  const SamplingParams& p = params_;
  const float* src = logits;
  if (penalised()) {
    work_.assign(logits, logits + vocab);
    for_each_penalty(vocab, [&](int32_t t, float subtract) {
      work_[t] = penalised_logit(work_[t], p.repetition_penalty, subtract);
    });
    src = work_.data();
  }
  if (p.greedy()) return argmax(src, vocab);
  return draw(src, vocab);
}

namespace {

// Candidate tokens whose first `sorted` entries are in descending order (logit, then lower
// index first), the rest in no order: sorted further on demand, a few more at a time, so a
// draw that needs only the top of the distribution never sorts the whole vocabulary.
class LazyOrder {
 public:
  LazyOrder(const float* logits, std::vector<int32_t>& idx) : l_(logits), idx_(idx) {}
  // The i-th largest candidate (i < size()).
  int32_t at(size_t i) {
    if (i >= sorted_) extend(std::max<size_t>(2 * i + 1, sorted_ + 64));
    return idx_[i];
  }
  // Sorts the first n (at most all) candidates: a heap selection from the unsorted rest (most
  // tokens fail the first comparison with the heap's least, so this is about one pass).
  void extend(size_t n) {
    n = std::min(n, idx_.size());
    if (n <= sorted_) return;
    auto by_logit = [&](int32_t a, int32_t b) {
      return l_[a] > l_[b] || (l_[a] == l_[b] && a < b);
    };
    std::partial_sort(idx_.begin() + sorted_, idx_.begin() + n, idx_.end(), by_logit);
    sorted_ = n;
  }
  size_t size() const { return idx_.size(); }

 private:
  const float* l_;
  std::vector<int32_t>& idx_;
  size_t sorted_ = 0;
};

// top-p, then the draw, over candidates in descending order: prob(i) is the i-th one's
// probability, the first `keep` are kept (their mass `kept_mass`, when `mass_known`). Returns the
// index drawn, or nullopt when the cut or the walk needs a candidate past the first `held` (or
// the mass stays unknown); `uniform` is called once, and only once the cut is settled.
template <typename Prob, typename Uniform>
std::optional<size_t> top_p_and_draw(Prob prob, size_t keep, double kept_mass, bool mass_known,
                                     size_t held, float top_p, Uniform uniform) {
  if (top_p < 1.0f) {
    double acc = 0.0;
    for (size_t i = 0; i < keep; ++i) {
      if (i >= held) return std::nullopt;
      acc += prob(i);
      if (acc >= top_p) {
        keep = i + 1;
        kept_mass = acc;
        mass_known = true;
        break;
      }
    }
  }
  if (!mass_known) return std::nullopt;
  double u = uniform() * kept_mass;
  for (size_t i = 0; i < keep; ++i) {
    if (i >= held) return std::nullopt;
    u -= prob(i);
    if (u < 0.0) return i;
  }
  if (keep - 1 >= held) return std::nullopt;
  return keep - 1;
}

}  // namespace

// The candidates' probabilities are a softmax at the temperature over the top-k (or every
// token); min-p keeps those of at least min_p times the top one's; top-p the smallest prefix (in
// descending order) whose probability reaches top_p; the draw walks the kept prefix in that
// order. Only the prefix the cuts and the draw reach is ever sorted (the exponentials and the
// normaliser cost one pass over the candidates).
int32_t Sampler::draw(const float* src, int64_t vocab) {
  const SamplingParams& p = params_;
  idx_.resize(static_cast<size_t>(vocab));
  std::iota(idx_.begin(), idx_.end(), 0);
  LazyOrder order(src, idx_);
  if (p.top_k > 0 && p.top_k < vocab) {
    order.extend(static_cast<size_t>(p.top_k));
    idx_.resize(static_cast<size_t>(p.top_k));
  }
  const double inv_t = 1.0 / p.temperature;
  const double mx = src[order.at(0)];
  // Weights exp((logit - max) / T) of every candidate, and their sum.
  weight_.resize(static_cast<size_t>(vocab));  // read only where written below
  double sum = 0.0;
  for (int32_t t : idx_) {
    const double w = std::exp((static_cast<double>(src[t]) - mx) * inv_t);
    weight_[t] = w;
    sum += w;
  }
  const double top = 1.0 / sum;  // the top candidate's probability (its weight is 1)
  auto prob = [&](size_t i) { return weight_[order.at(i)] / sum; };
  // min-p: the kept candidates are a prefix of the descending order (probability >= floor).
  size_t keep = order.size();
  double kept_mass = 1.0;
  if (p.min_p > 0.0f) {
    const double floor = p.min_p * top;
    keep = 0;
    kept_mass = 0.0;
    for (int32_t t : idx_) {
      const double q = weight_[t] / sum;
      if (q >= floor) {
        ++keep;
        kept_mass += q;
      }
    }
    keep = std::max<size_t>(keep, 1);
  }
  // top-p: the smallest prefix of the kept ones whose mass reaches top_p; then the draw (every
  // candidate is at hand: it always draws).
  return order.at(*top_p_and_draw(prob, keep, kept_mass, true, order.size(), p.top_p,
                                  [&] { return uniform(); }));
}

namespace {
constexpr int64_t kSummaryEntries = 64;  // of a sampled (not greedy) row
}  // namespace

int64_t Sampler::summary_entries() const {
  return params_.greedy() ? 1 : kSummaryEntries;
}

float Sampler::summary_temperature() const {
  return params_.greedy() ? -1.0f : params_.temperature;
}

// draw() on the summary's entries (the row's largest, in its order): every cut and the walk
// reach only a prefix of the descending order, and the normaliser is the summary's sum. When
// they would reach past the entries held, nothing is drawn.
std::optional<int32_t> Sampler::sample(const LogitsSummary& s, int64_t vocab,
                                       bool penalties_applied) {
  const SamplingParams& p = params_;
  if ((penalised() && !penalties_applied) || s.id.empty()) return std::nullopt;
  if (p.greedy()) return s.id[0];
  const size_t held = s.id.size();
  const bool cut_k = p.top_k > 0 && p.top_k < vocab;
  if (cut_k && static_cast<size_t>(p.top_k) > held) return std::nullopt;
  const size_t candidates = cut_k ? static_cast<size_t>(p.top_k) : static_cast<size_t>(vocab);
  const double inv_t = 1.0 / p.temperature;
  const double mx = s.value[0];
  auto weight = [&](size_t i) { return std::exp((static_cast<double>(s.value[i]) - mx) * inv_t); };
  double sum = s.sumt;
  if (cut_k) {
    sum = 0.0;
    for (size_t i = 0; i < candidates; ++i) sum += weight(i);
  }
  auto prob = [&](size_t i) { return weight(i) / sum; };
  size_t keep = candidates;
  double kept_mass = 1.0;
  bool mass_known = true;
  if (p.min_p > 0.0f) {
    const double floor = p.min_p * (1.0 / sum);
    keep = 0;
    kept_mass = 0.0;
    while (keep < held && keep < candidates && prob(keep) >= floor) kept_mass += prob(keep++);
    // Every entry held passes: how many more do is not known.
    mass_known = keep < held || keep == candidates;
    keep = std::max<size_t>(keep, 1);
    if (!mass_known) keep = candidates;
  }
  const uint64_t before = rng_;
  const std::optional<size_t> i =
      top_p_and_draw(prob, keep, kept_mass, mass_known, held, p.top_p, [&] { return uniform(); });
  if (!i) {
    rng_ = before;  // as if this draw never started
    return std::nullopt;
  }
  return s.id[*i];
}

}  // namespace hibana
