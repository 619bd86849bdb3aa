// sampler_bench: the engine's per-token cost of drawing a token from a Qwen-sized vocabulary
// (151,936 logits) on one thread, for the sampling settings agents send. Logits are normal
// with one clear favourite, like a model's; each row prints microseconds per token.
//
//   sampler_bench [--tokens N]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "engine/sampler.h"

int main(int argc, char** argv) {
  int tokens = 200;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--tokens") == 0) tokens = std::atoi(argv[i + 1]);
  }
  const int64_t V = 151936;
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(V);
  for (float& x : logits) x = normal(gen);
  logits[42] = 25.0f;
  struct Setting {
    const char* name;
    float temperature, top_p, min_p;
    int top_k;
    float repetition_penalty;
  };
  const Setting settings[] = {
      {"greedy", 0.0f, 1.0f, 0.0f, 0, 1.0f},
      {"temperature 1", 1.0f, 1.0f, 0.0f, 0, 1.0f},
      {"temperature 0.7, top_p 0.95", 0.7f, 0.95f, 0.0f, 0, 1.0f},
      {"temperature 0.6, top_p 0.95, top_k 20", 0.6f, 0.95f, 0.0f, 20, 1.0f},
      {"temperature 1, min_p 0.05", 1.0f, 1.0f, 0.05f, 0, 1.0f},
      {"temperature 0.7, repetition 1.1", 0.7f, 1.0f, 0.0f, 0, 1.1f}};
  std::printf("%-40s %12s\n", "setting (vocabulary 151936)", "us/token");
  for (const Setting& s : settings) {
    hibana::SamplingParams p;
    p.temperature = s.temperature;
    p.top_p = s.top_p;
    p.min_p = s.min_p;
    p.top_k = s.top_k;
    p.repetition_penalty = s.repetition_penalty;
    p.seed = 3;
    hibana::Sampler sampler(p);
    std::vector<int32_t> prompt(2000);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(i * 37 % V);
    sampler.set_prompt(prompt);
    uint64_t check = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < tokens; ++i) {
      const int32_t t = sampler.sample(logits.data(), V);
      sampler.accept(t);
      check = check * 31 + static_cast<uint64_t>(t);
    }
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-40s %12.1f   (check %llu)\n", s.name, us / tokens,
                static_cast<unsigned long long>(check % 1000));
  }
  return 0;
}
