// The host-RAM and SSD tiers of a tensor-parallel engine's other ranks. Rank 0's engine and
// prefix cache decide every movement of state (what to spill, restore, forget); each rank keeps
// its own shard's bytes in tiers of its own, which rank 0 opens and closes with its engine
// (BlockMove::Op::open carries what rank 0 built, as tier_setup() words it) and which follow
// every move rank 0 makes (Model::move_block), the ranks agreeing on each result.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "model/model.h"
#include "state/host_store.h"
#include "state/pool_block_mover.h"
#include "state/ssd_store.h"

namespace hibana {

// Where a rank keeps its SSD blocks: `dir` itself with one rank, else its own subdirectory
// dir/rank-R-of-N (a cache written with another --tp is never read: the fingerprint, which
// covers the shard, differs too).
std::string rank_cache_dir(const std::string& dir, int rank, int ranks);

// What rank 0 opened: a host budget (0: none) and an SSD directory (empty: none) of a size.
struct TierSetup {
  uint64_t host_bytes = 0;
  uint64_t ssd_bytes = 0;
  std::string dir;
  std::string encode() const;
  static TierSetup decode(const std::string& words);
};

// A rank other than 0: its tiers, opened and closed by rank 0's moves, and its part of every
// move in between (PoolBlockMover on this rank's pool and tiers).
class FollowerTiers final : public BlockMover {
 public:
  explicit FollowerTiers(const Model& model) : model_(model) {}
  ~FollowerTiers() override;  // flushes host RAM to the SSD, as rank 0's engine does
  bool move(const BlockMove& m, const StateViews& state) override;

 private:
  void close();
  const Model& model_;
  std::unique_ptr<SsdStore> ssd_;
  std::unique_ptr<HostStore> host_;
  std::unique_ptr<PoolBlockMover> mover_;
};

}  // namespace hibana
