// Perplexity of a model on a token stream, over non-overlapping windows (each window starts
// from an empty state; its first token is context only) — the same procedure as the training
// script's evaluation, so the two can be compared.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "model/model.h"

namespace hibana {

struct PerplexityResult {
  double perplexity = 0.0;
  double mean_nll = 0.0;           // nats per predicted token
  int64_t tokens = 0;              // predicted tokens
  double next_token_accuracy = 0;  // greedy top-1
  double mtp_accuracy = -1;        // MTP top-1 for the token after next (-1: no MTP head)
  int64_t windows = 0;
};

PerplexityResult perplexity(const Model& model, std::span<const int32_t> ids, int64_t window,
                            const std::function<void(int64_t done, int64_t total)>& progress = {});

}  // namespace hibana
