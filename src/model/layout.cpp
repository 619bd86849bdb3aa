#include "model/layout.h"

#include <algorithm>
#include <climits>
#include <string>

#include "core/device_memory.h"
#include "core/error.h"

namespace hibana {

void LayoutStorage::to_device(Device device) {
  if (device == Device::cpu) return;
  std::vector<int32_t>* arrays[] = {&positions, &token_seq,  &seq_start, &page_table,
                                    &kv_slot,   &state_slot, &snapshot};
  Tensor* views[] = {&layout.positions,    &layout.token_seq, &layout.seq_start,
                     &layout.page_table,   &layout.kv_slot,   &layout.state_slot,
                     &layout.snapshot_slot};
  std::vector<int32_t> packed;
  for (auto* a : arrays) packed.insert(packed.end(), a->begin(), a->end());
  device_copy = Buffer(packed.size() * sizeof(int32_t), device);
  copy_bytes(device_copy.data(), device, packed.data(), Device::cpu,
             packed.size() * sizeof(int32_t));
  size_t off = 0;
  for (size_t i = 0; i < 7; ++i) {
    views[i]->data = static_cast<int32_t*>(device_copy.data()) + off;
    views[i]->device = device;
    off += arrays[i]->size();
  }
}

void LayoutStorage::finish(int64_t T, int64_t S, int64_t page_size, int64_t max_pages,
                           GdnMode mode) {
  layout.num_tokens = T;
  layout.num_seqs = S;
  layout.page_size = page_size;
  layout.max_pages = max_pages;
  layout.gdn_mode = mode;
  layout.positions = Tensor(positions.data(), DType::i32, {T});
  layout.token_seq = Tensor(token_seq.data(), DType::i32, {T});
  layout.seq_start = Tensor(seq_start.data(), DType::i32, {S + 1});
  layout.page_table = Tensor(page_table.data(), DType::i32, {S, max_pages});
  layout.kv_slot = Tensor(kv_slot.data(), DType::i32, {T});
  layout.state_slot = Tensor(state_slot.data(), DType::i32, {S});
  layout.snapshot_slot = Tensor(snapshot.data(), DType::i32, {T});
}

LayoutStorage build_layout(const std::vector<SeqDesc>& seqs, const StateViews& state,
                           bool needs_pages, bool needs_slots, GdnMode mode) {
  LayoutStorage s;
  const int64_t S = static_cast<int64_t>(seqs.size());
  const int64_t ps = state.page_size;
  int64_t T = 0, max_pages = 1;
  for (const SeqDesc& q : seqs) {
    T += q.n;
    max_pages = std::max<int64_t>(max_pages, static_cast<int64_t>(q.pages.size()));
  }
  s.page_table.assign(S * max_pages, -1);
  s.seq_start.push_back(0);
  for (int64_t i = 0; i < S; ++i) {
    const SeqDesc& q = seqs[i];
    const std::string who = "sequence " + std::to_string(i);
    check(q.n > 0, ErrorKind::invalid_argument, who + " has no tokens");
    check(q.start_pos >= 0, ErrorKind::invalid_argument, who + " starts at a negative position");
    const int64_t end = q.start_pos + q.n;
    check(end <= INT32_MAX, ErrorKind::invalid_argument, who + " is too long");
    if (needs_pages) {
      check(ps > 0, ErrorKind::internal, "state has no page size");
      const int64_t need = (end + ps - 1) / ps;
      check(static_cast<int64_t>(q.pages.size()) >= need, ErrorKind::invalid_argument,
            who + " reaches position " + std::to_string(end - 1) + " and needs " +
                std::to_string(need) + " KV pages, but has " + std::to_string(q.pages.size()));
      const int64_t num_pages = state.k_pages.empty() ? 0 : state.k_pages[0].shape[0];
      for (int64_t j = 0; j < static_cast<int64_t>(q.pages.size()); ++j) {
        check(q.pages[j] >= 0 && q.pages[j] < num_pages, ErrorKind::invalid_argument,
              who + " uses page " + std::to_string(q.pages[j]) + " outside the pool");
        s.page_table[i * max_pages + j] = q.pages[j];
      }
    }
    if (needs_slots) {
      const int64_t slots = state.ssm.empty() ? 0 : state.ssm[0].shape[0];
      check(q.slot >= 0 && q.slot < slots, ErrorKind::invalid_argument,
            who + " has no valid recurrent slot");
    }
    check(q.snapshots.empty() || static_cast<int64_t>(q.snapshots.size()) == q.n,
          ErrorKind::invalid_argument, who + ": snapshot_slots must have one entry per token");
    s.state_slot.push_back(q.slot);
    for (int64_t j = 0; j < q.n; ++j) {
      const int64_t p = q.start_pos + j;
      s.positions.push_back(static_cast<int32_t>(p));
      s.token_seq.push_back(static_cast<int32_t>(i));
      s.kv_slot.push_back(needs_pages ? static_cast<int32_t>(q.pages[p / ps] * ps + p % ps) : -1);
      int32_t snap = q.snapshots.empty() ? -1 : q.snapshots[j];
      if (snap >= 0 && needs_slots) {
        const int64_t slots = state.ssm[0].shape[0];
        check(snap < slots, ErrorKind::invalid_argument, who + ": snapshot slot outside the pool");
      }
      s.snapshot.push_back(snap);
    }
    s.seq_start.push_back(static_cast<int32_t>(T == 0 ? 0 : s.positions.size()));
  }
  s.finish(T, S, ps, max_pages, mode);
  return s;
}

std::vector<Backend::RowRange> prefill_rows(const std::vector<SeqDesc>& seqs, GdnMode mode) {
  std::vector<Backend::RowRange> rows;
  if (mode != GdnMode::aligned_chunks) return rows;
  constexpr int64_t B = Backend::kPrefillBlock;
  int64_t row = 0;
  for (const SeqDesc& s : seqs) {
    const int64_t first = (s.start_pos + B - 1) / B * B, end = (s.start_pos + s.n) / B * B;
    if (end > first) {
      const Backend::RowRange r{row + first - s.start_pos, row + end - s.start_pos};
      if (!rows.empty() && rows.back().end == r.begin) {
        rows.back().end = r.end;
      } else {
        rows.push_back(r);
      }
    }
    row += s.n;
  }
  return rows;
}

ScopedPrefillRows::ScopedPrefillRows(Backend& be, const std::vector<SeqDesc>& seqs, GdnMode mode)
    : be_(be) {
  std::vector<Backend::RowRange> rows = prefill_rows(seqs, mode);
  if (rows.empty()) return;
  int64_t tokens = 0;
  for (const SeqDesc& s : seqs) tokens += s.n;
  be_.set_prefill_rows(tokens, std::move(rows));
  set_ = true;
}

ScopedPrefillRows::~ScopedPrefillRows() {
  if (set_) be_.set_prefill_rows(0, {});
}

}  // namespace hibana
