// How a forward pass hands its logits rows to the caller: whole rows copied to host memory, or
// (ForwardOptions::summary_k) their summaries, with the rows kept where they were computed
// for the caller to fetch the few it still needs.
#pragma once

#include <memory>

#include "core/tensor.h"
#include "model/model.h"

namespace hibana {

// `logits` [R, vocab] f32 on the backend's device, owned by the shared handle (the summary
// path keeps it alive for ForwardOutput::fetch_row).
void deliver_logits(Backend& be, std::shared_ptr<OwnedTensor> logits, const ForwardOptions& options,
                    ForwardOutput& out);

// Logits already in out.logits (host memory): adds the summaries when asked.
void summarise_host_logits(Backend& be, const ForwardOptions& options, int64_t rows,
                           ForwardOutput& out);

}  // namespace hibana
