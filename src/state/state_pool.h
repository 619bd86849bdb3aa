// Memory for sequence state: KV pages of every attention layer and recurrent slots of every
// DeltaNet layer, allocated once and handed out by id. The model sees it through StateViews.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/state_views.h"

namespace hibana {

class StatePool {
 public:
  StatePool(const StateSpec& spec, int64_t page_size, int64_t num_pages, int64_t num_slots);

  const StateViews& views() const { return views_; }
  const StateSpec& spec() const { return spec_; }
  int64_t page_size() const { return page_size_; }
  int64_t num_pages() const { return num_pages_; }
  int64_t num_slots() const { return num_slots_; }
  int64_t free_pages() const { return static_cast<int64_t>(free_pages_.size()); }
  int64_t free_slots() const { return static_cast<int64_t>(free_slots_.size()); }
  size_t bytes() const;

  // Throw Error(out_of_memory) when the pool is exhausted. Pages are reference counted so the
  // prefix cache and several sequences can share the KV of a common prefix: alloc_page() hands
  // out one reference, retain_page() adds one, free_page() drops one and frees at zero.
  int32_t alloc_page();
  void retain_page(int32_t page);
  void free_page(int32_t page);
  int32_t page_refs(int32_t page) const { return page_refs_.at(page); }
  // A slot comes back zeroed (the state of an empty sequence).
  int32_t alloc_slot();
  void free_slot(int32_t slot);
  void clear_slot(int32_t slot);

 private:
  StateSpec spec_;
  int64_t page_size_, num_pages_, num_slots_;
  std::vector<Buffer> buffers_;
  StateViews views_;
  std::vector<int32_t> free_pages_, free_slots_;
  std::vector<int32_t> page_refs_;
  std::vector<uint8_t> slot_used_;
};

// The pages and slot of one sequence, returned to the pool on destruction.
class SequenceState {
 public:
  explicit SequenceState(StatePool& pool, bool with_slot = true);
  ~SequenceState();
  SequenceState(const SequenceState&) = delete;
  SequenceState& operator=(const SequenceState&) = delete;

  // Makes sure pages cover positions [0, positions).
  void reserve(int64_t positions);
  std::span<const int32_t> pages() const { return pages_; }
  int32_t slot() const { return slot_; }

 private:
  StatePool& pool_;
  std::vector<int32_t> pages_;
  int32_t slot_ = -1;
};

}  // namespace hibana
