#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <tuple>
#include <vector>

#include "core/error.h"

namespace hibana {
namespace {

std::vector<float> logits_of(std::initializer_list<float> l) {
  return l;
}

TEST(Sampler, GreedyPicksTheLargest) {
  SamplingParams p;
  Sampler s(p);
  auto l = logits_of({0.1f, 3.0f, 2.9f, -1.0f});
  EXPECT_EQ(s.sample(l.data(), 4), 1);
  p.temperature = 1.0f;
  p.top_k = 1;
  Sampler k1(p);
  EXPECT_EQ(k1.sample(l.data(), 4), 1);
}

TEST(Sampler, SameSeedSameTokensOtherSeedOtherTokens) {
  std::vector<float> l(50);
  for (int i = 0; i < 50; ++i) l[i] = 0.05f * i;
  auto run = [&](uint64_t seed) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(l.data(), 50));
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(Sampler, TopKTopPMinPRestrictTheCandidates) {
  auto l = logits_of({5.0f, 4.0f, 0.0f, -5.0f, 4.5f});
  auto seen = [&](SamplingParams p) {
    std::map<int32_t, int> counts;
    p.temperature = 1.0f;
    for (uint64_t seed = 0; seed < 300; ++seed) {
      p.seed = seed;
      Sampler s(p);
      counts[s.sample(l.data(), 5)]++;
    }
    return counts;
  };
  SamplingParams k;
  k.top_k = 2;
  auto c = seen(k);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_TRUE(c.count(0) && c.count(4));
  SamplingParams tp;
  tp.top_p = 0.5f;  // p(token 0) ~ 0.5: only the top token survives
  EXPECT_EQ(seen(tp).size(), 1u);
  SamplingParams mp;
  mp.min_p = 0.2f;  // drops tokens 2 and 3
  c = seen(mp);
  EXPECT_FALSE(c.count(2) || c.count(3));
  EXPECT_EQ(c.size(), 3u);
}

// The reference: every candidate sorted (logit descending, lower index first), softmax at the
// temperature over the top-k, min-p, top-p, then a walk of the kept prefix with the uniform
// number the sampler draws (its generator, as sampler.cpp seeds it).
int32_t reference_draw(const std::vector<float>& l, const SamplingParams& p) {
  uint64_t rng = p.seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
  uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const double uniform = static_cast<double>(z >> 11) * 0x1.0p-53;
  std::vector<int32_t> idx(l.size());
  for (size_t i = 0; i < l.size(); ++i) idx[i] = static_cast<int32_t>(i);
  std::sort(idx.begin(), idx.end(),
            [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  size_t keep = p.top_k > 0 ? std::min<size_t>(p.top_k, idx.size()) : idx.size();
  std::vector<double> prob(keep);
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    prob[i] = std::exp((static_cast<double>(l[idx[i]]) - l[idx[0]]) / p.temperature);
    sum += prob[i];
  }
  for (double& q : prob) q /= sum;
  while (keep > 1 && prob[keep - 1] < p.min_p * prob[0]) --keep;
  double acc = 0.0;
  for (size_t i = 0; i < keep && p.top_p < 1.0f; ++i) {
    acc += prob[i];
    if (acc >= p.top_p) {
      keep = i + 1;
      break;
    }
  }
  double total = 0.0;
  for (size_t i = 0; i < keep; ++i) total += prob[i];
  double u = uniform * total;
  for (size_t i = 0; i < keep; ++i) {
    u -= prob[i];
    if (u < 0.0) return idx[i];
  }
  return idx[keep - 1];
}

// Runs fn(row, V, params) over random rows with ties (V = 7, 300, 5000), every cut below, the
// temperatures given and `seeds` seeds.
template <typename F>
void over_rows_and_cuts(uint32_t salt, int reps, std::initializer_list<float> temperatures,
                        uint64_t seeds, F&& fn) {
  std::mt19937 gen(salt);
  std::normal_distribution<float> normal(0.0f, 2.5f);
  for (int64_t V : {7, 300, 5000}) {
    std::vector<float> l(static_cast<size_t>(V));
    for (int rep = 0; rep < reps; ++rep) {
      for (float& x : l) x = std::round(normal(gen) * 8.0f) / 8.0f;  // ties too
      for (float t : temperatures) {
        for (auto [k, top_p, min_p] : {std::tuple{0, 1.0f, 0.0f},
                                       {0, 0.9f, 0.0f},
                                       {0, 1.0f, 0.05f},
                                       {40, 0.95f, 0.0f},
                                       {0, 0.7f, 0.01f},
                                       {3, 1.0f, 0.0f},
                                       {100, 1.0f, 0.0f}}) {
          for (uint64_t seed = 0; seed < seeds; ++seed) {
            SamplingParams p;
            p.temperature = t;
            p.top_k = k;
            p.top_p = top_p;
            p.min_p = min_p;
            p.seed = seed;
            fn(l, V, p);
          }
        }
      }
    }
  }
}

// The sampler sorts only what its cuts and its draw reach (a full sort of a 152k vocabulary
// per token cost 17 ms): it must draw what a full sort would, whatever the cuts.
TEST(Sampler, DrawsWhatAFullSortWould) {
  int differ = 0, cases = 0;
  over_rows_and_cuts(5, 4, {0.3f, 1.0f, 2.0f}, 25,
                     [&](const std::vector<float>& l, int64_t V, const SamplingParams& p) {
                       Sampler s(p);
                       differ += s.sample(l.data(), V) != reference_draw(l, p);
                       ++cases;
                     });
  EXPECT_EQ(differ, 0) << "of " << cases << " draws";
}

// A draw from a summary of the row (its largest entries and sums) is the draw from the whole
// row, or nothing with the generator untouched (then the whole row gives the same token as
// it would have): sequences of draws agree with a sampler that always had the whole row.
TEST(Sampler, DrawsFromASummaryWhatTheWholeRowGives) {
  int differ = 0, cases = 0, from_summary = 0, from_row = 0;
  over_rows_and_cuts(9, 3, {0.0f, 0.3f, 1.0f, 3.0f}, 6,
                     [&](const std::vector<float>& l, int64_t V, const SamplingParams& p) {
                       Sampler whole(p), summarised(p);
                       const int64_t n = summarised.summary_entries();
                       std::vector<int32_t> packed(static_cast<size_t>(summary_words(n)));
                       summarise_row(l.data(), V, summarised.summary_temperature(), n,
                                     packed.data());
                       const LogitsSummary sum = unpack_summary(packed.data(), n);
                       for (int draw = 0; draw < 6; ++draw) {
                         std::optional<int32_t> got = summarised.sample(sum, V);
                         (got ? from_summary : from_row)++;
                         if (!got) got = summarised.sample(l.data(), V);
                         differ += *got != whole.sample(l.data(), V);
                         ++cases;
                       }
                     });
  EXPECT_EQ(differ, 0) << "of " << cases << " draws";
  // Both ways were taken (most draws from the summary; flat rows at high temperature need
  // more than 64 entries).
  EXPECT_GT(from_summary, cases / 2);
  EXPECT_GT(from_row, 0);
}

// A penalised sampler draws from the summary of a row its penalties were applied to
// (add_penalties, then penalise_rows where the row is) what it draws from the raw row, which it
// penalises itself; from a summary of the raw row it draws nothing. Over sequences of draws
// that accept their tokens (the presence and frequency terms grow) with a prompt.
TEST(Sampler, PenalisedDrawsFromASummaryOfThePenalisedRow) {
  int differ = 0, cases = 0, from_summary = 0, calls = 0;
  over_rows_and_cuts(13, 2, {0.0f, 0.7f, 1.5f}, 3,
                     [&](const std::vector<float>& l, int64_t V, const SamplingParams& base) {
                       SamplingParams p = base;
                       const int c = calls++;
                       p.repetition_penalty = c % 3 == 2 ? 1.0f : 1.25f;
                       p.presence_penalty = c % 2 ? 0.5f : 0.0f;
                       p.frequency_penalty = c % 3 == 1 ? -0.3f : 0.4f;
                       Sampler whole(p), summarised(p);
                       std::vector<int32_t> prompt;
                       for (int64_t t = 0; t < V; t += 3) prompt.push_back(static_cast<int32_t>(t));
                       whole.set_prompt(prompt);
                       summarised.set_prompt(prompt);
                       const int64_t n = summarised.summary_entries();
                       std::vector<int32_t> packed(static_cast<size_t>(summary_words(n)));
                       std::vector<float> pen(l.size());
                       for (int draw = 0; draw < 6; ++draw) {
                         LogitsPenalties lp;
                         summarised.add_penalties(lp, V);
                         penalise_rows(Tensor(const_cast<float*>(l.data()), DType::f32, {1, V}),
                                       lp, Tensor(pen.data(), DType::f32, {1, V}));
                         summarise_row(pen.data(), V, summarised.summary_temperature(), n,
                                       packed.data());
                         const LogitsSummary sum = unpack_summary(packed.data(), n);
                         EXPECT_FALSE(summarised.sample(sum, V, false));
                         std::optional<int32_t> got = summarised.sample(sum, V, true);
                         from_summary += got.has_value();
                         if (!got) got = summarised.sample(l.data(), V);
                         const int32_t want = whole.sample(l.data(), V);
                         differ += *got != want;
                         summarised.accept(*got);
                         whole.accept(want);
                         ++cases;
                       }
                     });
  EXPECT_EQ(differ, 0) << "of " << cases << " draws";
  EXPECT_GT(from_summary, cases / 2);
}

// penalise_rows: the listed tokens of each row, and only those, take the repetition transform
// (divided above zero, multiplied at or below it) and then the subtraction; in place too.
TEST(Sampler, PenaliseRowsChangesTheListedTokensOnly) {
  std::vector<float> l = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
  LogitsPenalties p;
  p.open_row(2.0f);
  p.token = {0, 1};
  p.subtract = {0.0f, 0.25f};
  p.close_row();
  p.open_row(1.0f);
  p.token.push_back(2);
  p.subtract.push_back(1.0f);
  p.close_row();
  std::vector<float> out(6, -9.0f);
  penalise_rows(Tensor(l.data(), DType::f32, {2, 3}), p, Tensor(out.data(), DType::f32, {2, 3}));
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.25f, 0.5f, 3.0f, -2.0f, 0.0f}));
  penalise_rows(Tensor(l.data(), DType::f32, {2, 3}), p, Tensor(l.data(), DType::f32, {2, 3}));
  EXPECT_EQ(l, out);
}

// The summary holds the largest entries in the row's order (larger first, the lower token
// among equals), its maximum and both sums.
TEST(Sampler, SummaryHoldsTheLargestEntriesInOrder) {
  const std::vector<float> l = {1.0f, 3.0f, -0.0f, 3.0f, 0.0f, -2.0f, 2.5f};
  std::vector<int32_t> packed(static_cast<size_t>(summary_words(5)));
  summarise_row(l.data(), 7, 0.5f, 5, packed.data());
  const LogitsSummary s = unpack_summary(packed.data(), 5);
  EXPECT_EQ(s.id, (std::vector<int32_t>{1, 3, 6, 0, 2}));
  EXPECT_EQ(s.max, 3.0f);
  double sum1 = 0.0, sumt = 0.0;
  for (float x : l) {
    sum1 += std::exp(static_cast<double>(x) - 3.0);
    sumt += std::exp((static_cast<double>(x) - 3.0) * 2.0);
  }
  EXPECT_DOUBLE_EQ(s.sum1, sum1);
  EXPECT_DOUBLE_EQ(s.sumt, sumt);
  float lp = 0.0f;
  ASSERT_TRUE(s.logprob(6, lp));
  EXPECT_FLOAT_EQ(lp, static_cast<float>(2.5 - (3.0 + std::log(sum1))));
  EXPECT_FALSE(s.logprob(5, lp));  // not held
  // More entries asked than the row has: all of them.
  std::vector<int32_t> all(static_cast<size_t>(summary_words(10)));
  summarise_row(l.data(), 7, -1.0f, 10, all.data());
  EXPECT_EQ(unpack_summary(all.data(), 10).id.size(), 7u);
}

TEST(Sampler, PenaltiesDiscourageRepeats) {
  auto l = logits_of({2.0f, 1.9f, 0.0f});
  SamplingParams p;
  p.repetition_penalty = 1.5f;  // 2.0 / 1.5 < 1.9
  Sampler s(p);
  int32_t prompt[] = {0};
  s.set_prompt(prompt);
  EXPECT_EQ(s.sample(l.data(), 3), 1);
  SamplingParams f;
  f.frequency_penalty = 0.2f;
  Sampler sf(f);
  EXPECT_EQ(sf.sample(l.data(), 3), 0);
  sf.accept(0);
  EXPECT_EQ(sf.sample(l.data(), 3), 1);  // 2.0 - 0.2 < 1.9
  // Presence counts a token once, frequency per occurrence.
  SamplingParams pr;
  pr.presence_penalty = 0.08f;
  Sampler sp(pr);
  for (int i = 0; i < 3; ++i) sp.accept(0);
  EXPECT_EQ(sp.sample(l.data(), 3), 0);  // 2.0 - 0.08 > 1.9
  SamplingParams fr;
  fr.frequency_penalty = 0.04f;
  Sampler sq(fr);
  for (int i = 0; i < 3; ++i) sq.accept(0);
  EXPECT_EQ(sq.sample(l.data(), 3), 1);  // 2.0 - 3 * 0.04 < 1.9
}

TEST(Sampler, RejectsBadParameters) {
  SamplingParams p;
  p.temperature = -1.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.top_p = 0.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.min_p = 2.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.repetition_penalty = 0.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.top_k = -3;
  EXPECT_THROW(Sampler{p}, Error);
}

}  // namespace
}  // namespace hibana
