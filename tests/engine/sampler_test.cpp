#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <map>

#include "core/error.h"

namespace hibana {
namespace {

std::vector<float> logits_of(std::initializer_list<float> l) { return l; }

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
