// Private to src/model: how rank 0 of a tensor-parallel model tells the other ranks which pass
// to run next (every rank must run the same passes, in the same order, for the collectives to
// meet).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"
#include "parallel/communicator.h"

namespace hibana {

// Rank 0: announces a pass (the batch, its options and the geometry of the pool it runs on).
void send_step(Communicator& comm, std::span<const SequenceInput> seqs,
               const ForwardOptions& options, const StateViews& state);
// Rank 0: announces a pass of the MTP head.
void send_mtp_step(Communicator& comm, std::span<const MtpInput> seqs, const StateViews& state);
// Rank 0: announces a copy of recurrent slot `from` to slot `to` (Model::copy_recurrent_slot).
void send_copy_slot(Communicator& comm, const StateViews& state, int32_t from, int32_t to);
// Rank 0: announces a block move (Model::move_block); every rank then joins agree_on().
void send_block_move(Communicator& comm, const StateViews& state, const BlockMove& move);
// Every rank, after a block move: true when it succeeded on every rank (`ok` is this rank's).
bool agree_on(Communicator& comm, bool ok);
// Rank 0: announces that no more passes come.
void send_stop(Communicator& comm);

// What the other ranks receive: the pass, whose spans point into `storage` and `hidden`.
struct ReceivedStep {
  bool mtp = false;   // a pass of the MTP head (mtp_seqs), else of the model (seqs)
  bool copy = false;  // no pass: recurrent slot copy_from is copied to copy_to
  int32_t copy_from = -1, copy_to = -1;
  bool block_move = false;  // no pass: `move` is made, then the ranks agree_on() its result
  BlockMove move;
  std::vector<SequenceInput> seqs;  // the MTP head's sequences too, as mtp_seqs come from them
  std::vector<MtpInput> mtp_seqs;
  ForwardOptions options;
  StateGeometry geometry;
  std::vector<int32_t> storage;
  std::vector<float> hidden;  // the MTP head's hidden rows
};
// Other ranks: waits for rank 0's next message; false when it says stop.
bool receive_step(Communicator& comm, ReceivedStep& step);

}  // namespace hibana
