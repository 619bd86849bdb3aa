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

int32_t Sampler::sample(const float* logits, int64_t vocab) {
  const SamplingParams& p = params_;
  const bool penalise = p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
                        p.frequency_penalty != 0.0f;
  const float* src = logits;
  if (penalise) {
    work_.assign(logits, logits + vocab);
    if (p.repetition_penalty != 1.0f) {
      for (int32_t t : seen_) {
        if (t >= vocab) continue;
        float& l = work_[t];
        l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
      }
    }
    for (const auto& [t, count] : generated_) {
      if (t >= vocab) continue;
      work_[t] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(count);
    }
    src = work_.data();
  }
  if (p.greedy()) return argmax(src, vocab);

  // Candidates sorted by logit (descending, ties by index), cut by top-k.
  std::vector<int32_t> idx(vocab);
  std::iota(idx.begin(), idx.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) { return src[a] > src[b] || (src[a] == src[b] && a < b); };
  int64_t keep = vocab;
  if (p.top_k > 0 && p.top_k < vocab) {
    keep = p.top_k;
    std::partial_sort(idx.begin(), idx.begin() + keep, idx.end(), by_logit);
  } else {
    std::sort(idx.begin(), idx.end(), by_logit);
  }
  idx.resize(keep);
  // Softmax at the temperature over the kept candidates.
  std::vector<double> prob(keep);
  const double inv_t = 1.0 / p.temperature;
  const double mx = src[idx[0]];
  double sum = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    prob[i] = std::exp((static_cast<double>(src[idx[i]]) - mx) * inv_t);
    sum += prob[i];
  }
  for (double& q : prob) q /= sum;
  // min-p: drop candidates below min_p times the top probability.
  if (p.min_p > 0.0f) {
    const double floor = p.min_p * prob[0];
    while (keep > 1 && prob[keep - 1] < floor) --keep;
  }
  // top-p: the smallest prefix whose mass reaches top_p.
  if (p.top_p < 1.0f) {
    double acc = 0.0;
    for (int64_t i = 0; i < keep; ++i) {
      acc += prob[i];
      if (acc >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double total = 0.0;
  for (int64_t i = 0; i < keep; ++i) total += prob[i];
  double u = uniform() * total;
  for (int64_t i = 0; i < keep; ++i) {
    u -= prob[i];
    if (u < 0.0) return idx[i];
  }
  return idx[keep - 1];
}

}  // namespace hibana
