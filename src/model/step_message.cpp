// The message is one broadcast of its length, then one of int64 values:
// [kind, gdn_mode, want_hidden, page_size, pages, slots, hidden values, sequences,
//  per sequence: tokens, start_pos, pages, slot, logits mode, snapshots,
//  then every sequence's token ids, page ids and snapshot slots in that order],
// then, for a pass of the MTP head, one broadcast of its hidden rows (f32, bit for bit).
// A slot copy is the same header with no sequences, followed by [from, to].
#include "model/step_message.h"

#include "core/error.h"

namespace hibana {

namespace {

constexpr int64_t kStop = -1;   // the length that means stop
constexpr int64_t kHeader = 8;  // values before the first sequence's
constexpr int64_t kFields = 6;  // values per sequence
enum Kind : int64_t { kForward = 0, kMtp = 1, kCopySlot = 2 };

void send(Communicator& comm, Kind kind, std::span<const SequenceInput> seqs,
          const ForwardOptions& options, const StateViews& state, std::span<const float> hidden,
          std::span<const int64_t> extra = {}) {
  std::vector<int64_t> m = {kind,
                            static_cast<int64_t>(options.gdn_mode),
                            options.want_hidden,
                            state.page_size,
                            state.k_pages.empty() ? 0 : state.k_pages[0].shape[0],
                            state.conv.empty() ? 0 : state.conv[0].shape[0],
                            static_cast<int64_t>(hidden.size()),
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
  m.insert(m.end(), extra.begin(), extra.end());
  int64_t length = static_cast<int64_t>(m.size());
  comm.broadcast(&length, sizeof length, 0);
  comm.broadcast(m.data(), m.size() * sizeof(int64_t), 0);
  if (!hidden.empty()) {
    comm.broadcast(const_cast<float*>(hidden.data()), hidden.size() * sizeof(float), 0);
  }
}

}  // namespace

void send_step(Communicator& comm, std::span<const SequenceInput> seqs,
               const ForwardOptions& options, const StateViews& state) {
  send(comm, kForward, seqs, options, state, {});
}

void send_mtp_step(Communicator& comm, std::span<const MtpInput> seqs, const StateViews& state) {
  std::vector<SequenceInput> as_seqs;
  std::vector<float> hidden;
  for (const MtpInput& s : seqs) {
    SequenceInput in;
    in.tokens = s.next_tokens;
    in.start_pos = s.start_pos;
    in.pages = s.pages;
    in.logits = s.logits;
    as_seqs.push_back(in);
    hidden.insert(hidden.end(), s.hidden.begin(), s.hidden.end());
  }
  send(comm, kMtp, as_seqs, ForwardOptions{}, state, hidden);
}

void send_copy_slot(Communicator& comm, const StateViews& state, int32_t from, int32_t to) {
  const int64_t slots[2] = {from, to};
  send(comm, kCopySlot, {}, ForwardOptions{}, state, {}, slots);
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
  step.mtp = m[0] == kMtp;
  step.copy = m[0] == kCopySlot;
  step.options.gdn_mode = static_cast<GdnMode>(m[1]);
  step.options.want_hidden = m[2] != 0;
  step.geometry = {m[3], m[4], m[5]};
  if (step.copy) {
    check(length == kHeader + 2 && m[6] == 0 && m[7] == 0, ErrorKind::internal,
          "a tensor-parallel slot copy message of the wrong length");
    step.copy_from = static_cast<int32_t>(m[kHeader]);
    step.copy_to = static_cast<int32_t>(m[kHeader + 1]);
    step.seqs.clear();
    step.mtp_seqs.clear();
    return true;
  }
  step.hidden.resize(static_cast<size_t>(m[6]));
  if (!step.hidden.empty()) {
    comm.broadcast(step.hidden.data(), step.hidden.size() * sizeof(float), 0);
  }
  const int64_t S = m[7];
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
  step.mtp_seqs.clear();
  if (step.mtp) {  // each token brings one hidden row
    size_t tokens = 0;
    for (const SequenceInput& s : step.seqs) tokens += s.tokens.size();
    check(tokens == 0 ? step.hidden.empty() : step.hidden.size() % tokens == 0, ErrorKind::internal,
          "a tensor-parallel MTP message whose hidden rows do not match");
    const size_t H = tokens == 0 ? 0 : step.hidden.size() / tokens;
    const float* h = step.hidden.data();
    for (const SequenceInput& s : step.seqs) {
      MtpInput in;
      in.next_tokens = s.tokens;
      in.hidden = {h, s.tokens.size() * H};
      h += s.tokens.size() * H;
      in.start_pos = s.start_pos;
      in.pages = s.pages;
      in.logits = s.logits;
      step.mtp_seqs.push_back(in);
    }
  }
  return true;
}

}  // namespace hibana
