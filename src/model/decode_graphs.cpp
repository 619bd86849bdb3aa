#include "model/decode_graphs.h"

#include <exception>
#include <string>
#include <vector>

#include "core/device_memory.h"
#include "core/error.h"
#include "core/log.h"
#include "model/layout.h"
#include "model/logits_output.h"

namespace hibana {

namespace {
int64_t round_up_pow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}
}  // namespace

struct DecodeGraphs::Entry {
  Buffer inputs;  // device: ids | positions | token_seq | seq_start | pages | kv | state | snap
  // The step's inputs on the host, copied into `inputs` without waiting: run() waits for the
  // device before it returns, so the next step finds the copy done before it refills this.
  std::vector<int32_t> host_inputs;
  Tensor ids;
  BatchLayout layout;
  Tensor logits;  // the batch size's shared logits buffer (recordings never run concurrently)
  std::shared_ptr<void> graph;
  bool failed = false;  // the recording failed once: run this bucket op by op
};

DecodeGraphs::DecodeGraphs(Backend& backend, int64_t vocab, bool needs_pages, bool needs_slots)
    : be_(backend), vocab_(vocab), needs_pages_(needs_pages), needs_slots_(needs_slots) {}

DecodeGraphs::~DecodeGraphs() = default;

bool DecodeGraphs::run(std::span<const SequenceInput> seqs, const StateViews& state,
                       const ForwardOptions& options, const Body& body, ForwardOutput& out) {
  const int64_t B = static_cast<int64_t>(seqs.size());
  if (!be_.can_capture() || options.want_hidden || B == 0 || B > kMaxBatch) return false;
  for (const SequenceInput& s : seqs) {
    if (s.tokens.size() != 1 || s.logits != LogitsMode::last || !s.snapshot_slots.empty()) {
      return false;
    }
  }
  const int64_t Bp = round_up_pow2(B);
  std::vector<SeqDesc> desc;
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < Bp; ++i) {
    const SequenceInput& s = seqs[std::min(i, B - 1)];
    desc.push_back({1, s.start_pos, s.pages, s.slot, {}});
    tokens.push_back(i < B ? s.tokens[0] : 0);
    check(tokens.back() >= 0 && tokens.back() < vocab_, ErrorKind::invalid_argument,
          "token id " + std::to_string(tokens.back()) + " is outside the vocabulary (size " +
              std::to_string(vocab_) + ")");
  }
  LayoutStorage ls = build_layout(desc, state, needs_pages_, needs_slots_, options.gdn_mode);
  for (int64_t i = B; i < Bp; ++i) {  // padding rows write no state
    ls.kv_slot[i] = -1;
    ls.state_slot[i] = -1;
  }
  const int64_t P = ls.layout.max_pages, Pp = round_up_pow2(P);
  std::vector<int32_t> table(static_cast<size_t>(Bp * Pp), -1);
  for (int64_t i = 0; i < Bp; ++i) {
    std::copy_n(ls.page_table.begin() + i * P, P, table.begin() + i * Pp);
  }

  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<const void*> addresses;
  for (const std::vector<Tensor>* list :
       {&state.k_pages, &state.v_pages, &state.conv, &state.ssm}) {
    for (const Tensor& t : *list) addresses.push_back(t.data);
  }
  Key key{Bp, Pp, static_cast<int>(options.gdn_mode), std::move(addresses)};
  if (entries_.size() >= kMaxEntries && !entries_.count(key)) entries_.clear();
  std::unique_ptr<Entry>& slot = entries_[key];
  const Device dev = be_.device();
  if (!slot) {
    slot = std::make_unique<Entry>();
    Entry& e = *slot;
    e.inputs = Buffer(static_cast<size_t>(7 * Bp + 1 + Bp * Pp) * sizeof(int32_t), dev);
    int32_t* p = static_cast<int32_t*>(e.inputs.data());
    auto take = [&](std::initializer_list<int64_t> dims) {
      Tensor t(p, DType::i32, dims, dev);
      p += t.numel();
      return t;
    };
    e.ids = take({Bp});
    e.layout.positions = take({Bp});
    e.layout.token_seq = take({Bp});
    e.layout.seq_start = take({Bp + 1});
    e.layout.page_table = take({Bp, Pp});
    e.layout.kv_slot = take({Bp});
    e.layout.state_slot = take({Bp});
    e.layout.snapshot_slot = take({Bp});
    e.layout.num_tokens = e.layout.num_seqs = Bp;
    e.layout.page_size = ls.layout.page_size;
    e.layout.max_pages = Pp;
    e.layout.gdn_mode = options.gdn_mode;
    OwnedTensor& logits = logits_[Bp];
    if (logits.tensor.empty()) logits = make_uninit_tensor(DType::f32, {Bp, vocab_}, dev);
    e.logits = logits.tensor;
  }
  Entry& e = *slot;

  // This step's inputs, in the entry's order, in one copy queued before the step (no wait for
  // it: a host round trip less per step).
  std::vector<int32_t>& packed = e.host_inputs;
  packed.assign(tokens.begin(), tokens.end());
  for (const std::vector<int32_t>* a : {&ls.positions, &ls.token_seq, &ls.seq_start, &table,
                                        &ls.kv_slot, &ls.state_slot, &ls.snapshot}) {
    packed.insert(packed.end(), a->begin(), a->end());
  }
  check(packed.size() * sizeof(int32_t) == e.inputs.size(), ErrorKind::internal,
        "decode graph: input size");
  copy_bytes_async(e.inputs.data(), dev, packed.data(), Device::cpu, e.inputs.size());
  // Should anything below throw, wait for the device before leaving: the upload may still be
  // reading host_inputs, which the next step refills (or entries_.clear() frees).
  struct WaitOnThrow {
    Backend& be;
    int unwinding = std::uncaught_exceptions();
    ~WaitOnThrow() {
      if (std::uncaught_exceptions() <= unwinding) return;
      try {
        be.synchronize();
      } catch (...) {  // (the exception in flight says what went wrong)
      }
    }
  } wait_on_throw{be_};

  if (e.graph) {
    be_.replay(e.graph);
    ++replays_;
  } else {
    body(e.ids, e.layout, e.logits);  // this step's results, op by op
    if (!e.failed) {
      be_.begin_capture();
      bool whole = true;
      try {
        body(e.ids, e.layout, e.logits);
      } catch (const std::exception& ex) {
        log_warn("recording a decode graph failed: ", ex.what());
        whole = false;
      }
      e.graph = be_.end_capture();  // (always: the recording must end)
      if (!whole) e.graph.reset();  // it holds only the ops before the throw: never replay it
      e.failed = e.graph == nullptr;
    }
  }

  out.vocab = vocab_;
  out.summaries.clear();
  out.fetch_row = nullptr;
  if (options.summary_k > 0) {
    // The rows stay on the device for fetch_row, out of the bucket's buffer (which the next
    // step of any engine on this model overwrites): a copy queued behind the step, which the
    // summaries' download waits for.
    auto rows = std::make_shared<OwnedTensor>(make_uninit_tensor(DType::f32, {B, vocab_}, dev));
    copy_bytes_async(rows->tensor.data, dev, e.logits.data, dev, rows->tensor.nbytes());
    deliver_logits(be_, std::move(rows), options, out);
  } else {
    out.logits.resize(static_cast<size_t>(B * vocab_));
    copy_to_host(e.logits.slice_rows(0, B), out.logits.data());
  }
  out.hidden_states.clear();
  out.first_row.resize(B);
  out.row_count.assign(B, 1);
  for (int64_t i = 0; i < B; ++i) out.first_row[i] = i;
  return true;
}

}  // namespace hibana
