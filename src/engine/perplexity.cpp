#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/generator.h"
#include "engine/sampler.h"

namespace hibana {

namespace {
// log-softmax of one row at `target`, in double for a stable sum over many tokens.
double nll_of(const float* logits, int64_t vocab, int32_t target) {
  double mx = logits[0];
  for (int64_t v = 1; v < vocab; ++v) mx = std::max(mx, static_cast<double>(logits[v]));
  double sum = 0.0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(logits[v]) - mx);
  return std::log(sum) + mx - static_cast<double>(logits[target]);
}
}  // namespace

PerplexityResult perplexity(const Model& model, std::span<const int32_t> ids, int64_t window,
                            const std::function<void(int64_t, int64_t)>& progress) {
  check(window >= 2, ErrorKind::invalid_argument, "the perplexity window must be at least 2 tokens");
  check(ids.size() >= 2, ErrorKind::invalid_argument, "perplexity needs at least 2 tokens of text");
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t total_windows = (n - 1 + window - 1) / window;
  StatePool pool = make_pool_for(model, window);
  PerplexityResult r;
  r.mtp_accuracy = model.has_mtp() ? 0.0 : -1.0;
  double nll = 0.0;
  int64_t correct = 0, mtp_correct = 0, mtp_count = 0;
  const int64_t H = model.config().hidden_size;
  for (int64_t s = 0; s < n - 1; s += window) {
    const int64_t len = std::min(window, n - s);
    if (len < 2) break;
    SequenceState seq(pool);
    seq.reserve(len);
    SequenceInput in;
    in.tokens = ids.subspan(s, len);
    in.pages = seq.pages();
    in.slot = seq.slot();
    in.logits = LogitsMode::all;
    ForwardOptions fo;
    fo.want_hidden = model.has_mtp();
    ForwardOutput out;
    model.forward(std::span<const SequenceInput>(&in, 1), pool.views(), fo, out);
    std::vector<double> row_nll(len - 1);
    std::vector<uint8_t> row_hit(len - 1);
    default_thread_pool().parallel_for(len - 1, [&](int64_t t) {
      const int32_t target = ids[s + t + 1];
      row_nll[t] = nll_of(out.row(t), out.vocab, target);
      row_hit[t] = argmax(out.row(t), out.vocab) == target;
    });
    for (int64_t t = 0; t + 1 < len; ++t) {  // summed in order: the result is thread-independent
      nll += row_nll[t];
      correct += row_hit[t];
    }
    r.tokens += len - 1;
    if (model.has_mtp() && len >= 3) {
      // Row t pairs the final hidden state at t with token t + 1 and predicts token t + 2.
      MtpInput mi;
      mi.next_tokens = ids.subspan(s + 1, len - 2);
      mi.hidden = std::span<const float>(out.hidden_states.data(), (len - 2) * H);
      mi.pages = seq.pages();
      mi.logits = LogitsMode::all;
      ForwardOutput mo;
      model.forward_mtp(std::span<const MtpInput>(&mi, 1), pool.views(), mo);
      for (int64_t t = 0; t + 2 < len; ++t) mtp_correct += argmax(mo.row(t), mo.vocab) == ids[s + t + 2];
      mtp_count += len - 2;
    }
    ++r.windows;
    if (progress) progress(r.windows, total_windows);
  }
  r.mean_nll = nll / static_cast<double>(r.tokens);
  r.perplexity = std::exp(r.mean_nll);
  r.next_token_accuracy = static_cast<double>(correct) / static_cast<double>(r.tokens);
  if (model.has_mtp()) {
    r.mtp_accuracy = mtp_count ? static_cast<double>(mtp_correct) / static_cast<double>(mtp_count) : 0.0;
  }
  return r;
}

}  // namespace hibana
