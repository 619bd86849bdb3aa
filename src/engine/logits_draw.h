// A step's tokens from its forward output: the options that ask for summaries of the logits
// rows instead of the rows (core/logits_summary.h), and the draw of one sequence's token (and
// logprobs) from its summary, or from its whole row when the summary does not decide it.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/model.h"

namespace hibana {

// A row of the step that wants logits: its request and sampler.
struct DrawRow {
  const GenerationRequest* request;
  const Sampler* sampler;
};

// Sets fo to return summaries of the rows (with the samplers' penalties applied before, where
// the rows are) when at least one row can be drawn from its summary and none wants more than 64
// top logprobs. A row with a logit bias or a logits processor (constraints), or a penalised
// one that wants logprobs, is fetched whole by draw_token instead. Otherwise leaves fo.
// `vocab`: the model's vocabulary (the penalties' tokens stay below it).
void ask_summaries(const std::vector<DrawRow>& rows, int64_t vocab, ForwardOptions& fo);

struct DrawCounts {
  std::atomic<uint64_t> summary{0};  // tokens drawn from a summary
  std::atomic<uint64_t> fetched{0};  // rows fetched whole after a summary
};

// The token of the sequence whose logits are out's `seq`-th (its last row), with its logprobs
// when the request asks; logit bias and the request's processor apply (whole rows only).
StreamEvent draw_token(const GenerationRequest& r, Sampler& sampler, const ForwardOutput& out,
                       int64_t seq, DrawCounts& counts);

}  // namespace hibana
