// The message is one broadcast of its length (broadcast_idle: the other ranks wait there while
// rank 0 is idle, without keeping a core busy), then one of int64 values:
// [kind, gdn_mode, want_hidden, page_size, pages, slots, hidden values, sequences,
//  per sequence: tokens, start_pos, pages, slot, logits mode, snapshots,
//  then every sequence's token ids, page ids and snapshot slots in that order],
// then, for a pass of the MTP head, one broadcast of its hidden rows (f32, bit for bit).
// A slot copy is the same header with no sequences, followed by [from, to]; a block move the
// same, followed by [op, key hi, key lo, kind, index, setup length, one value per setup byte].
#include "model/step_message.h"

#include "core/error.h"

namespace hibana {

namespace {

constexpr int64_t kStop = -1;   // the length that means stop
constexpr int64_t kHeader = 8;  // values before the first sequence's
constexpr int64_t kFields = 6;  // values per sequence
enum Kind : int64_t { kForward = 0, kMtp = 1, kCopySlot = 2, kBlockMove = 3 };
constexpr int64_t kMoveFields = 6;  // block move values before the setup bytes

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
  comm.broadcast_idle(&length, sizeof length, 0);
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

void send_block_move(Communicator& comm, const StateViews& state, const BlockMove& move) {
  std::vector<int64_t> v = {static_cast<int64_t>(move.op),
                            static_cast<int64_t>(move.key_hi),
                            static_cast<int64_t>(move.key_lo),
                            move.kind,
                            move.index,
                            static_cast<int64_t>(move.setup.size())};
  for (char c : move.setup) v.push_back(static_cast<unsigned char>(c));
  send(comm, kBlockMove, {}, ForwardOptions{}, state, {}, v);
}

bool agree_on(Communicator& comm, bool ok) {
  float failed = ok ? 0.0f : 1.0f;  // host memory: every communicator takes it
  comm.all_reduce_sum(&failed, 1);
  return failed == 0.0f;
}

void send_stop(Communicator& comm) {
  int64_t length = kStop;
  comm.broadcast_idle(&length, sizeof length, 0);
}

bool receive_step(Communicator& comm, ReceivedStep& step) {
  std::vector<int64_t> m;
  int64_t length = 0;
  comm.broadcast_idle(&length, sizeof length, 0);
  if (length == kStop) return false;
  check(length >= kHeader, ErrorKind::internal, "a tensor-parallel step message too short");
  m.resize(static_cast<size_t>(length));
  comm.broadcast(m.data(), m.size() * sizeof(int64_t), 0);
  step.mtp = m[0] == kMtp;
  step.copy = m[0] == kCopySlot;
  step.block_move = m[0] == kBlockMove;
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
  if (step.block_move) {
    check(length >= kHeader + kMoveFields && m[6] == 0 && m[7] == 0 &&
              length == kHeader + kMoveFields + m[kHeader + 5],
          ErrorKind::internal, "a tensor-parallel block move message of the wrong length");
    const int64_t* v = m.data() + kHeader;
    step.move.op = static_cast<BlockMove::Op>(v[0]);
    step.move.key_hi = static_cast<uint64_t>(v[1]);
    step.move.key_lo = static_cast<uint64_t>(v[2]);
    step.move.kind = static_cast<uint32_t>(v[3]);
    step.move.index = static_cast<int32_t>(v[4]);
    step.move.setup.assign(static_cast<size_t>(v[5]), '\0');
    for (int64_t i = 0; i < v[5]; ++i) step.move.setup[i] = static_cast<char>(v[kMoveFields + i]);
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
