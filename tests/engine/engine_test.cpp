// The serving engine: continuous batching must give every request exactly what it would get
// alone, survive memory pressure, and cancel, time out and refuse work cleanly.
#include "engine/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/generator.h"
#include "support/fixture_model.h"

namespace hibana {
namespace {

using namespace std::chrono_literals;

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::none;
  std::vector<StreamEvent> events;
};

Outcome collect(RequestStream& s, std::chrono::seconds timeout = 60s) {
  Outcome o;
  const auto until = SteadyClock::now() + timeout;
  StreamEvent ev;
  while (s.next(ev, until)) {
    if (ev.kind == StreamEvent::Kind::finished) {
      o.finish = ev.finish;
      return o;
    }
    o.tokens.push_back(ev.token);
    o.events.push_back(ev);
  }
  ADD_FAILURE() << "request did not finish in time";
  return o;
}

std::vector<int32_t> prompt_of(int64_t n, int32_t salt, int64_t vocab) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 29 + salt * 13 + 1) % vocab);
  return t;
}

std::vector<int32_t> solo(const Model& m, const std::vector<int32_t>& prompt, int64_t n,
                          GdnMode mode) {
  StatePool pool = make_pool_for(m, static_cast<int64_t>(prompt.size()) + n + 1);
  GenerateOptions go;
  go.max_new_tokens = n;
  go.stop_at_eos = false;
  go.prefill_chunk = 64;
  go.gdn_mode = mode;
  return generate(m, pool, prompt, go);
}

GenerationRequest greedy_request(std::vector<int32_t> prompt, int64_t n) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  r.ignore_eos = true;
  return r;
}

class EngineOnDevice : public testing::TestWithParam<std::string> {};

// Through the scheduler, the prefix cache and the state pool on each device.
TEST_P(EngineOnDevice, MatchesTransformersGreedy) {
  if (test::unavailable(GetParam())) GTEST_SKIP();
  std::shared_ptr<const Model> model = test::load_fixture_model("qwen3_next", GetParam());
  EngineOptions opt;
  Engine engine(model, opt);
  for (const auto& ref : test::load_reference("qwen3_next")) {
    auto s = engine.submit(greedy_request(ref.ids, static_cast<int64_t>(ref.greedy.size())));
    Outcome o = collect(*s);
    EXPECT_EQ(o.finish, FinishReason::length);
    EXPECT_EQ(o.tokens, ref.greedy) << "prompt of " << ref.ids.size();
    EXPECT_EQ(s->usage().prompt_tokens, static_cast<int64_t>(ref.ids.size()));
    EXPECT_EQ(s->usage().completion_tokens, static_cast<int64_t>(ref.greedy.size()));
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, EngineOnDevice, testing::ValuesIn(test::test_devices()),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

// Many requests at once, fewer slots than requests and a small token budget: every request
// gets exactly its solo output.
TEST(Engine, ConcurrentRequestsGetTheirSoloOutputs) {
  for (const char* name : {"qwen3_moe", "qwen3_next"}) {
    SCOPED_TRACE(name);
    std::shared_ptr<const Model> model = test::load_fixture_model(name);
    const int64_t V = model->config().vocab_size;
    EngineOptions opt;
    opt.max_sequences = 4;
    opt.step_token_budget = 64;
    Engine engine(model, opt);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 10; ++i) {
      prompts.push_back(prompt_of(5 + 23 * i, i, V));
      streams.push_back(engine.submit(greedy_request(prompts.back(), 12)));
    }
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(collect(*streams[i]).tokens, solo(*model, prompts[i], 12, GdnMode::aligned_chunks))
          << "request " << i;
    }
    engine.wait_idle();
    // Idle: the only pages in use are the ones the prefix cache keeps.
    EXPECT_EQ(engine.metrics().kv_pages_used, engine.metrics().cache_pages);
    EXPECT_EQ(engine.metrics().requests_finished, 10u);
  }
}

// A pass with no decode rows takes up to the prefill budget (EngineOptions::
// prefill_token_budget): a 600-token prompt alone in passes of 256, 256 and 88 tokens (and
// one decode step), not in ten of 64; the same tokens. 0, as on the CPU by default, keeps the
// step budget.
TEST(Engine, APromptAloneTakesTheLargerPrefillPasses) {
  std::shared_ptr<const Model> model = test::load_fixture_model("qwen3_moe");
  const std::vector<int32_t> prompt = prompt_of(600, 5, model->config().vocab_size);
  auto run = [&](int64_t prefill_tokens, uint64_t& steps) {
    EngineOptions opt;
    opt.step_token_budget = 64;
    opt.prefill_token_budget = prefill_tokens;
    Engine engine(model, opt);
    const Outcome o = collect(*engine.submit(greedy_request(prompt, 2)));
    engine.wait_idle();
    steps = engine.metrics().steps;
    return o.tokens;
  };
  uint64_t small = 0, large = 0, unset = 0;
  const std::vector<int32_t> by_64 = run(0, small), by_256 = run(256, large);
  EXPECT_EQ(small, 11u);
  EXPECT_EQ(large, 4u);
  EXPECT_EQ(by_256, by_64);
  EXPECT_EQ(by_64, solo(*model, prompt, 2, GdnMode::aligned_chunks));
  run(-1, unset);  // (auto: the step budget on the CPU)
  EXPECT_EQ(unset, 11u);
}

// Decodes that leave less than a page of the step budget do not stall a prompt until they end:
// with a 64-token budget and one sequence generating 40 tokens, a 200-token prompt admitted
// with it prefills a page a pass beside its decodes (one pass over the budget each) and both
// are done in the generating sequence's 40 passes (not 45: 40, then the prompt's 4 and a
// decode). Both get their solo tokens.
TEST(Engine, DecodesLeavingUnderAPageDoNotStallAPrompt) {
  std::shared_ptr<const Model> model = test::load_fixture_model("qwen3_moe");
  const int64_t V = model->config().vocab_size;
  const std::vector<int32_t> a = prompt_of(10, 6, V), b = prompt_of(200, 7, V);
  EngineOptions opt;
  opt.step_token_budget = 64;
  Engine engine(model, opt);
  engine.hold_admission(true);  // both start in the same step
  auto sa = engine.submit(greedy_request(a, 40)), sb = engine.submit(greedy_request(b, 2));
  engine.hold_admission(false);
  EXPECT_EQ(collect(*sb).tokens, solo(*model, b, 2, GdnMode::aligned_chunks));
  EXPECT_EQ(collect(*sa).tokens, solo(*model, a, 40, GdnMode::aligned_chunks));
  engine.wait_idle();
  EXPECT_EQ(engine.metrics().steps, 40u);
}

// Sampled requests drawn together (their draws run on the pool's threads) get the tokens each
// gets alone with its seed, and their logprobs.
TEST(Engine, SampledRequestsInOneBatchGetTheirSoloTokens) {
  std::shared_ptr<const Model> model = test::load_fixture_model("qwen3_moe");
  const int64_t V = model->config().vocab_size;
  auto request = [&](int i) {
    GenerationRequest r = greedy_request(prompt_of(9 + 5 * i, 70 + i, V), 10);
    r.sampling.temperature = 0.9f;
    r.sampling.top_p = i % 2 ? 0.9f : 1.0f;
    r.sampling.seed = 1000 + static_cast<uint64_t>(i);
    r.top_logprobs = i % 3 == 0 ? 2 : -1;
    return r;
  };
  auto alone = [&](int i) {
    Engine e(model, EngineOptions{});
    return collect(*e.submit(request(i)));
  };
  EngineOptions opt;
  opt.max_sequences = 8;
  Engine engine(model, opt);
  engine.hold_admission(true);  // all eight start in the same step
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 8; ++i) streams.push_back(engine.submit(request(i)));
  engine.hold_admission(false);
  for (int i = 0; i < 8; ++i) {
    const Outcome together = collect(*streams[i]), solo = alone(i);
    EXPECT_EQ(together.tokens, solo.tokens) << "request " << i;
    ASSERT_EQ(together.events.size(), solo.events.size());
    for (size_t t = 0; t < solo.events.size(); ++t) {
      EXPECT_EQ(together.events[t].logprob, solo.events[t].logprob) << i << " " << t;
      EXPECT_EQ(together.events[t].top_logprobs.size(), solo.events[t].top_logprobs.size());
    }
  }
}

// The requests admitted as one batch (exact DeltaNet, up to 8 sequences) to an engine that draws
// from summaries or moves every whole row; their outcomes, and the engine's metrics in *m.
std::vector<Outcome> run_batch(const std::shared_ptr<const Model>& model, bool summaries,
                               const std::vector<GenerationRequest>& requests, EngineMetrics* m) {
  EngineOptions opt;
  opt.gdn_mode = GdnMode::recurrent;
  opt.max_sequences = 8;
  opt.sample_from_summaries = summaries;
  Engine engine(model, opt);
  engine.hold_admission(true);  // one batch
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const GenerationRequest& r : requests) streams.push_back(engine.submit(r));
  engine.hold_admission(false);
  std::vector<Outcome> out;
  for (auto& s : streams) out.push_back(collect(*s));
  *m = engine.metrics();
  return out;
}

class Summaries : public testing::TestWithParam<std::string> {};

// Steps draw from summaries of the logits rows (their largest entries and sums, computed
// where the rows are) and fetch a whole row only when a draw needs more: greedy, sampled,
// top-k and top-p requests, with and without logprobs, in one batch, get the tokens and
// logprobs of an engine that moves every whole row to the host. On the GPU the summaries come
// from the CUDA kernel (float exponentials: logprobs within 1e-5).
TEST_P(Summaries, GiveTheTokensAndLogprobsOfWholeRows) {
  if (test::unavailable(GetParam())) GTEST_SKIP();
  std::shared_ptr<const Model> model = test::load_fixture_model("qwen3_next", GetParam());
  const int64_t V = model->config().vocab_size;
  auto request = [&](int i) {
    GenerationRequest r = greedy_request(prompt_of(12 + 9 * i, 90 + i, V), 12);
    if (i % 3 != 0) {
      r.sampling.temperature = i == 5 ? 2.5f : 0.9f;  // 2.5: flat rows, fetched whole
      r.sampling.top_p = i % 2 ? 0.9f : 1.0f;
      r.sampling.top_k = i == 4 ? 20 : 0;
      r.sampling.seed = 77 + static_cast<uint64_t>(i);
    }
    r.top_logprobs = i % 2 == 0 ? 3 : -1;
    return r;
  };
  auto run = [&](bool summaries) {
    std::vector<GenerationRequest> requests;
    for (int i = 0; i < 6; ++i) requests.push_back(request(i));
    EngineMetrics m;
    std::vector<Outcome> out = run_batch(model, summaries, requests, &m);
    if (summaries) {
      EXPECT_GT(m.summary_draws, 40u);  // of 72 tokens
      EXPECT_GT(m.whole_row_fetches, 0u);  // the flat rows
    } else {
      EXPECT_EQ(m.summary_draws + m.whole_row_fetches, 0u);
    }
    return out;
  };
  const std::vector<Outcome> summarised = run(true), whole = run(false);
  const float tol = GetParam() == "cpu" ? 0.0f : 1e-5f;
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(summarised[i].tokens, whole[i].tokens) << "request " << i;
    ASSERT_EQ(summarised[i].events.size(), whole[i].events.size());
    for (size_t t = 0; t < whole[i].events.size(); ++t) {
      const StreamEvent &a = summarised[i].events[t], &b = whole[i].events[t];
      EXPECT_NEAR(a.logprob, b.logprob, tol) << i << " " << t;
      ASSERT_EQ(a.top_logprobs.size(), b.top_logprobs.size());
      for (size_t j = 0; j < b.top_logprobs.size(); ++j) {
        EXPECT_EQ(a.top_logprobs[j].token, b.top_logprobs[j].token);
        EXPECT_NEAR(a.top_logprobs[j].logprob, b.top_logprobs[j].logprob, tol);
      }
    }
  }
}

// Penalised requests draw from summaries too: the penalties are applied where the rows are
// (Backend::penalise_rows) before the rows are summarised. Repetition, presence and frequency
// penalties (a negative one too), greedy and sampled, in one batch with a logit-biased request
// and a penalised one that wants logprobs (both fetched whole): every request gets the tokens
// of an engine that moves every whole row to the host and penalises there. (Before, one
// penalised row sent every row of the step to the host whole.)
TEST_P(Summaries, PenalisedRowsDrawFromSummariesWithTheTokensOfWholeRows) {
  if (test::unavailable(GetParam())) GTEST_SKIP();
  std::shared_ptr<const Model> model = test::load_fixture_model("qwen3_next", GetParam());
  const int64_t V = model->config().vocab_size;
  constexpr int kRequests = 6;
  auto request = [&](int i, bool penalties) {
    GenerationRequest r = greedy_request(prompt_of(10 + 7 * i, 40 + i, V), 24);
    if (i % 2 == 1) {
      r.sampling.temperature = 0.8f;
      r.sampling.top_p = 0.95f;
      r.sampling.seed = 5 + static_cast<uint64_t>(i);
    }
    if (penalties) {
      r.sampling.repetition_penalty = i < 2 ? 1.3f : 1.0f;
      r.sampling.presence_penalty = i == 2 || i == 3 ? 0.7f : 0.0f;
      r.sampling.frequency_penalty = i == 3 ? -0.4f : i == 4 ? 0.5f : 0.0f;
    }
    if (i == 5) r.logit_bias[static_cast<int32_t>(V / 2)] = 3.0f;  // fetched whole
    if (i == 4) r.top_logprobs = 2;  // penalised with logprobs: fetched whole
    return r;
  };
  auto run = [&](bool summaries, bool penalties) {
    std::vector<GenerationRequest> requests;
    for (int i = 0; i < kRequests; ++i) requests.push_back(request(i, penalties));
    EngineMetrics m;
    std::vector<Outcome> out = run_batch(model, summaries, requests, &m);
    if (summaries) {
      EXPECT_GT(m.summary_draws, 60u);         // of 144 tokens: requests 0-3 (96) mostly
      EXPECT_GE(m.whole_row_fetches, 48u);     // requests 4 and 5, every token
    }
    return out;
  };
  const std::vector<Outcome> summarised = run(true, true), whole = run(false, true);
  const std::vector<Outcome> plain = run(false, false);
  int changed = 0;  // the penalties must matter, or the comparison shows nothing
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(summarised[i].tokens, whole[i].tokens) << "request " << i;
    changed += whole[i].tokens != plain[i].tokens;
  }
  EXPECT_GE(changed, 3);
}

INSTANTIATE_TEST_SUITE_P(Devices, Summaries, testing::Values("cpu", "cuda"),
                         [](const testing::TestParamInfo<std::string>& p) { return p.param; });

// A KV cache with room for about two requests: the rest queue, some are preempted and
// recomputed; all finish, and in exact (recurrent) mode every output is the solo output.
TEST(Engine, MemoryPressureQueuesAndPreemptsWithoutLoss) {
  std::shared_ptr<const Model> model = test::load_fixture_model("qwen3_next");
  const int64_t V = model->config().vocab_size;
  EngineOptions opt;
  opt.gdn_mode = GdnMode::recurrent;
  opt.max_sequences = 6;
  opt.kv_cache_bytes = static_cast<int64_t>(model->state_spec().kv_bytes_per_token()) * 64 * 5;
  Engine engine(model, opt);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<RequestStream>> streams;
  // All six are queued before any runs: otherwise a slow submitter (a loaded CI machine) lets
  // the first requests finish early and there is no memory pressure to test.
  engine.hold_admission(true);
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(prompt_of(60 + 7 * i, 50 + i, V));
    streams.push_back(engine.submit(greedy_request(prompts.back(), 40)));
  }
  engine.hold_admission(false);
  for (int i = 0; i < 6; ++i) {
    Outcome o = collect(*streams[i]);
    EXPECT_EQ(o.finish, FinishReason::length);
    EXPECT_EQ(o.tokens, solo(*model, prompts[i], 40, GdnMode::recurrent)) << "request " << i;
  }
  engine.wait_idle();
  EXPECT_GT(engine.metrics().preemptions, 0u) << "the test did not create memory pressure";
  EXPECT_EQ(engine.metrics().kv_pages_used, engine.metrics().cache_pages);
}

TEST(Engine, CancelStopsARequestAndFreesItsState) {
  std::shared_ptr<const Model> model = test::load_fixture_model("qwen3_5");
  Engine engine(model, EngineOptions{});
  auto s = engine.submit(greedy_request(prompt_of(30, 1, model->config().vocab_size), 100000));
  StreamEvent ev;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s->next(ev, SteadyClock::now() + 30s));
  s->cancel();
  Outcome o = collect(*s);
  EXPECT_EQ(o.finish, FinishReason::cancelled);
  engine.wait_idle();
  EXPECT_EQ(engine.metrics().kv_pages_used, engine.metrics().cache_pages);
  EXPECT_EQ(engine.metrics().running, 0);
}

TEST(Engine, DeadlinesAndStopTokens) {
  std::shared_ptr<const Model> model = test::load_fixture_model("qwen3_dense");
  Engine engine(model, EngineOptions{});
  auto prompt = prompt_of(20, 2, model->config().vocab_size);
  GenerationRequest late = greedy_request(prompt, 50);
  late.deadline = SteadyClock::now() - 1s;
  EXPECT_EQ(collect(*engine.submit(late)).finish, FinishReason::deadline);

  auto first = solo(*model, prompt, 1, GdnMode::aligned_chunks);
  GenerationRequest stop = greedy_request(prompt, 50);
  stop.ignore_eos = false;
  stop.stop_token_ids = {first[0]};
  auto s = engine.submit(stop);
  Outcome o = collect(*s);
  EXPECT_EQ(o.finish, FinishReason::stop);
  EXPECT_TRUE(o.tokens.empty()) << "a stop token is not streamed";
  EXPECT_EQ(s->usage().completion_tokens, 1);
}

TEST(Engine, LogprobsAndLogitBias) {
  std::shared_ptr<const Model> model = test::load_fixture_model("qwen3_dense");
  Engine engine(model, EngineOptions{});
  auto prompt = prompt_of(12, 3, model->config().vocab_size);
  GenerationRequest r = greedy_request(prompt, 5);
  r.top_logprobs = 3;
  Outcome o = collect(*engine.submit(r));
  ASSERT_EQ(o.events.size(), 5u);
  for (const StreamEvent& ev : o.events) {
    EXPECT_LE(ev.logprob, 0.0f);
    ASSERT_EQ(ev.top_logprobs.size(), 3u);
    EXPECT_EQ(ev.top_logprobs[0].token, ev.token);  // greedy picks the most likely
    EXPECT_FLOAT_EQ(ev.top_logprobs[0].logprob, ev.logprob);
    EXPECT_GE(ev.top_logprobs[0].logprob, ev.top_logprobs[1].logprob);
  }
  GenerationRequest banned = greedy_request(prompt, 5);
  for (int32_t t : o.tokens) banned.logit_bias[t] = -100.0f;
  for (int32_t t : collect(*engine.submit(banned)).tokens) {
    EXPECT_EQ(std::count(o.tokens.begin(), o.tokens.end(), t), 0) << "banned token " << t;
  }
}

TEST(Engine, RefusesBadRequests) {
  std::shared_ptr<const Model> model = test::load_fixture_model("qwen3_dense");
  EngineOptions opt;
  opt.max_context = 100;
  Engine engine(model, opt);
  try {
    engine.submit(greedy_request(prompt_of(150, 1, model->config().vocab_size), 4));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_THAT(e.what(), testing::HasSubstr("150 tokens"));
    EXPECT_THAT(e.what(), testing::HasSubstr("100 tokens"));
  }
  EXPECT_THROW(engine.submit(greedy_request({}, 4)), Error);
  EXPECT_THROW(engine.submit(greedy_request({1, 999999}, 4)), Error);
  EXPECT_THROW(engine.submit(greedy_request({1, 2}, 0)), Error);
  EngineOptions full;
  full.max_queue = 0;
  Engine busy(model, full);
  try {
    busy.submit(greedy_request({1, 2}, 4));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::overloaded);
  }
}

}  // namespace
}  // namespace hibana
