#include "engine/logits_draw.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace hibana {

namespace {

// Most entries a step asks of a row's summary (a request wanting more takes whole rows).
constexpr int64_t kMaxSummaryEntries = 64;

// log-softmax value of one entry, and the top-n entries, from raw logits.
void logprobs_of(const float* logits, int64_t vocab, int32_t token, int32_t top, StreamEvent& ev) {
  double mx = logits[0];
  for (int64_t v = 1; v < vocab; ++v) mx = std::max(mx, static_cast<double>(logits[v]));
  double sum = 0.0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(logits[v]) - mx);
  const double lse = mx + std::log(sum);
  ev.logprob = static_cast<float>(logits[token] - lse);
  ev.top_logprobs.clear();
  if (top <= 0) return;
  std::vector<int32_t> idx(vocab);
  for (int64_t v = 0; v < vocab; ++v) idx[v] = static_cast<int32_t>(v);
  const int64_t n = std::min<int64_t>(top, vocab);
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (int64_t i = 0; i < n; ++i) {
    ev.top_logprobs.push_back({idx[i], static_cast<float>(logits[idx[i]] - lse)});
  }
}

// Logprobs of `ev.token` (held by the summary: it was drawn from it) and the top-n entries.
bool logprobs_from_summary(const LogitsSummary& sum, int32_t top, StreamEvent& ev) {
  if (!sum.logprob(ev.token, ev.logprob)) return false;
  const size_t n = static_cast<size_t>(std::max(top, 0));
  if (n > sum.id.size()) return false;
  const double lse = sum.lse();
  for (size_t i = 0; i < n; ++i) {
    ev.top_logprobs.push_back({sum.id[i], static_cast<float>(sum.value[i] - lse)});
  }
  return true;
}

// Whether a row's token (and logprobs) can come from its summary: not with a logit bias or a
// logits processor (they change the row on the host), nor with logprobs of a penalised row
// (they are of the raw row, the summary of the penalised one).
bool summary_serves(const GenerationRequest& r, const Sampler& sampler) {
  return r.logit_bias.empty() && !r.processor && !(sampler.penalised() && r.top_logprobs >= 0);
}

}  // namespace

void ask_summaries(const std::vector<DrawRow>& rows, int64_t vocab, ForwardOptions& fo) {
  int64_t k = 1;
  std::vector<float> temperature;
  LogitsPenalties penalties;
  bool served = false, penalised = false;
  for (const DrawRow& row : rows) {
    const GenerationRequest& r = *row.request;
    const Sampler& sampler = *row.sampler;
    if (!summary_serves(r, sampler)) {  // its whole row is fetched: the summary's least
      temperature.push_back(-1.0f);
      penalties.open_row(1.0f);
      penalties.close_row();
      continue;
    }
    int64_t need = sampler.summary_entries();
    float t = sampler.summary_temperature();
    if (r.top_logprobs >= 0) {
      need = std::max<int64_t>(need, r.top_logprobs);
      t = std::max(t, 0.0f);  // the logprobs need sum1
    }
    if (need > kMaxSummaryEntries) return;
    k = std::max(k, need);
    temperature.push_back(t);
    served = true;
    penalised = penalised || sampler.penalised();
    sampler.add_penalties(penalties, vocab);
  }
  if (!served) return;
  fo.summary_k = k;
  fo.summary_temperature = std::move(temperature);
  if (penalised) fo.penalties = std::move(penalties);
}

StreamEvent draw_token(const GenerationRequest& r, Sampler& sampler, const ForwardOutput& out,
                       int64_t seq, DrawCounts& counts) {
  StreamEvent ev;
  std::vector<float> fetched;
  const float* raw = nullptr;
  if (!out.summaries.empty()) {
    const int64_t row = out.last_row(seq);
    const LogitsSummary& sum = out.summaries[static_cast<size_t>(row)];
    const std::optional<int32_t> token =
        summary_serves(r, sampler) ? sampler.sample(sum, out.vocab, out.penalties_applied)
                                   : std::nullopt;
    if (token) {
      ev.token = *token;
      if (r.top_logprobs < 0 || logprobs_from_summary(sum, r.top_logprobs, ev)) {
        ++counts.summary;
        return ev;
      }
    }
    fetched.resize(static_cast<size_t>(out.vocab));  // the summary was not enough
    out.fetch_row(row, fetched.data());
    ++counts.fetched;
    if (token) {
      logprobs_of(fetched.data(), out.vocab, ev.token, r.top_logprobs, ev);
      return ev;
    }
    raw = fetched.data();
  } else {
    raw = out.last(seq);
  }
  const float* logits = raw;
  std::vector<float> biased;
  if (!r.logit_bias.empty() || r.processor) {
    biased.assign(raw, raw + out.vocab);
    for (const auto& [tok, bias] : r.logit_bias) {
      if (tok >= 0 && tok < out.vocab) biased[tok] += bias;
    }
    if (r.processor) r.processor->apply(biased.data(), out.vocab);
    logits = biased.data();
  }
  ev.token = sampler.sample(logits, out.vocab);
  if (r.top_logprobs >= 0) logprobs_of(raw, out.vocab, ev.token, r.top_logprobs, ev);
  return ev;
}

}  // namespace hibana
