// Private to src/model: decode steps replayed as recorded graphs (CUDA graphs).
//
// A step in which every sequence brings one token and wants the logits of it is padded to a
// bucket — the batch size rounded up to a power of two and the page-table width likewise — and
// its inputs (token ids and the batch layout) are copied into buffers that belong to the
// bucket. The first step of a bucket runs op by op (which also builds every op's lazily made
// tables), then the same work is recorded; later steps of the bucket copy their inputs in and
// replay the recording: one launch instead of hundreds of kernel launches and allocations.
//
// Padding rows repeat the last real sequence's position and pages with no KV slot and no
// recurrent slot, so they read valid memory and write no state; their logits are dropped.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"

namespace hibana {

class DecodeGraphs {
 public:
  // Queues the whole step for a layout: embedding of `ids`, every layer, final norm, lm_head
  // into `logits` [rows, vocab].
  using Body = std::function<void(const Tensor& ids, const BatchLayout& layout, Tensor logits)>;

  DecodeGraphs(Backend& backend, int64_t vocab, bool needs_pages, bool needs_slots);
  ~DecodeGraphs();

  // Runs the step through a graph when it qualifies (filling `out`, returning true); false
  // leaves the step to the caller.
  bool run(std::span<const SequenceInput> seqs, const StateViews& state,
           const ForwardOptions& options, const Body& body, ForwardOutput& out);

  // Steps run by replaying a recording so far.
  int64_t replays() const { return replays_; }

  static constexpr int64_t kMaxBatch = 256;

 private:
  struct Entry;
  // (padded batch, padded pages, DeltaNet mode, every state tensor's address): a recording
  // holds the addresses of the state pool it ran on.
  using Key = std::tuple<int64_t, int64_t, int, std::vector<const void*>>;
  static constexpr size_t kMaxEntries = 32;  // then every recording is dropped and remade

  Backend& be_;
  int64_t vocab_;
  bool needs_pages_, needs_slots_;
  std::mutex mutex_;
  std::map<Key, std::unique_ptr<Entry>> entries_;
  std::map<int64_t, OwnedTensor> logits_;  // per padded batch size
  int64_t replays_ = 0;
};

}  // namespace hibana
