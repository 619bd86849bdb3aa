// Private to src/model: the host arrays behind a BatchLayout, built from a batch's sequences
// and validated against the state pool, and their one-copy upload to the backend's device.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/state_views.h"

namespace hibana {

struct LayoutStorage {
  std::vector<int32_t> positions, token_seq, seq_start, page_table, kv_slot, state_slot, snapshot;
  BatchLayout layout;
  Buffer device_copy;

  // Points the layout at one device copy of all arrays (nothing to do for the CPU).
  void to_device(Device device);
  // Points the layout at the host arrays, for T tokens of S sequences.
  void finish(int64_t T, int64_t S, int64_t page_size, int64_t max_pages, GdnMode mode);
};

struct SeqDesc {
  int64_t n;
  int64_t start_pos;
  std::span<const int32_t> pages;
  int32_t slot;
  std::span<const int32_t> snapshots;
};

LayoutStorage build_layout(const std::vector<SeqDesc>& seqs, const StateViews& state,
                           bool needs_pages, bool needs_slots, GdnMode mode);

// The pass's prefill rows (Backend::set_prefill_rows): each sequence's rows whose aligned block
// of Backend::kPrefillBlock positions the pass covers whole, adjacent ranges joined. None in
// GdnMode::recurrent, where any split of a prompt must give the same bits.
std::vector<Backend::RowRange> prefill_rows(const std::vector<SeqDesc>& seqs, GdnMode mode);

// Those rows set on a backend for as long as it lives (a pass's layers), cleared after.
class ScopedPrefillRows {
 public:
  ScopedPrefillRows(Backend& be, const std::vector<SeqDesc>& seqs, GdnMode mode);
  ~ScopedPrefillRows();
  ScopedPrefillRows(const ScopedPrefillRows&) = delete;
  ScopedPrefillRows& operator=(const ScopedPrefillRows&) = delete;

 private:
  Backend& be_;
  bool set_ = false;
};

}  // namespace hibana
