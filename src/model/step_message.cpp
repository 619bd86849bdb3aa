// The message is one broadcast of its length, then one of int64 values:
// [gdn_mode, want_hidden, page_size, pages, slots, sequences,
//  per sequence: tokens, start_pos, pages, slot, logits mode, snapshots,
//  then every sequence's token ids, page ids and snapshot slots in that order].
#include "model/step_message.h"

#include "core/error.h"

namespace hibana {

namespace {

constexpr int64_t kStop = -1;   // the length that means stop
constexpr int64_t kHeader = 6;  // values before the first sequence's
constexpr int64_t kFields = 6;  // values per sequence

}  // namespace

void send_step(Communicator& comm, std::span<const SequenceInput> seqs,
               const ForwardOptions& options, const StateViews& state) {
  std::vector<int64_t> m = {static_cast<int64_t>(options.gdn_mode),
                            options.want_hidden,
                            state.page_size,
                            state.k_pages.empty() ? 0 : state.k_pages[0].shape[0],
                            state.conv.empty() ? 0 : state.conv[0].shape[0],
                            static_cast<int64_t>(seqs.size())};
  for (const SequenceInput& s : seqs) {
    m.insert(m.end(), {static_cast<int64_t>(s.tokens.size()), s.start_pos,
                       static_cast<int64_t>(s.pages.size()), s.slot, static_cast<int64_t>(s.logits),
                       static_cast<int64_t>(s.snapshot_slots.size())});
  }
  for (const SequenceInput& s : seqs) {
    m.insert(m.end(), s.tokens.begin(), s.tokens.end());
    m.insert(m.end(), s.pages.begin(), s.pages.end());
    m.insert(m.end(), s.snapshot_slots.begin(), s.snapshot_slots.end());
  }
  int64_t length = static_cast<int64_t>(m.size());
  comm.broadcast(&length, sizeof length, 0);
  comm.broadcast(m.data(), m.size() * sizeof(int64_t), 0);
}

void send_stop(Communicator& comm) {
  int64_t length = kStop;
  comm.broadcast(&length, sizeof length, 0);
}

bool receive_step(Communicator& comm, ReceivedStep& step) {
  std::vector<int64_t> m;
  int64_t length = 0;
  comm.broadcast(&length, sizeof length, 0);
  if (length == kStop) return false;
  check(length >= kHeader, ErrorKind::internal, "a tensor-parallel step message too short");
  m.resize(static_cast<size_t>(length));
  comm.broadcast(m.data(), m.size() * sizeof(int64_t), 0);
  step.options.gdn_mode = static_cast<GdnMode>(m[0]);
  step.options.want_hidden = m[1] != 0;
  step.geometry = {m[2], m[3], m[4]};
  const int64_t S = m[5];
  check(length >= kHeader + S * kFields, ErrorKind::internal,
        "a tensor-parallel step message too short");
  const int64_t* head = m.data() + kHeader;
  // Storage first (its data must not move once spans point into it).
  step.storage.assign(m.begin() + kHeader + S * kFields, m.end());
  step.seqs.assign(static_cast<size_t>(S), SequenceInput{});
  const int32_t* at = step.storage.data();
  for (int64_t i = 0; i < S; ++i, head += kFields) {
    SequenceInput& s = step.seqs[i];
    s.tokens = {at, static_cast<size_t>(head[0])};
    at += head[0];
    s.start_pos = head[1];
    s.pages = {at, static_cast<size_t>(head[2])};
    at += head[2];
    s.slot = static_cast<int32_t>(head[3]);
    s.logits = static_cast<LogitsMode>(head[4]);
    s.snapshot_slots = {at, static_cast<size_t>(head[5])};
    at += head[5];
  }
  check(at == step.storage.data() + step.storage.size(), ErrorKind::internal,
        "a tensor-parallel step message of the wrong length");
  return true;
}

}  // namespace hibana
