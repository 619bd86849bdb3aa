// Moves state blocks between a pool's views and the tiers below it (a BlockStore: host RAM
// and/or SSD): a page's K and V rows of every attention layer, or a slot's conv window and
// delta state of every DeltaNet layer, packed into one payload. The prefix cache makes its moves
// through StateOps::move_block with one of these, so on a tensor-parallel model every rank packs
// its own shard into its own tiers (each rank has one, made by the code that follows rank 0).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/state_views.h"
#include "state/block_store.h"

namespace hibana {

class PoolBlockMover final : public BlockMover {
 public:
  explicit PoolBlockMover(BlockStore* lower) : lower_(lower) {}
  // save_*: the page or slot is packed and put under the key; load_*: the block is read and
  // unpacked into it (false when missing or of the wrong size); forget: the block leaves every
  // tier. open and close do nothing here (true): the tiers are the caller's.
  bool move(const BlockMove& m, const StateViews& state) override;

  // Payload sizes of one page / one slot of `state`.
  static size_t page_bytes(const StateViews& state);
  static size_t slot_bytes(const StateViews& state);

 private:
  BlockStore* lower_;
};

}  // namespace hibana
