#include "engine/rank_tiers.h"

#include <sstream>

#include "core/error.h"
#include "core/log.h"

namespace hibana {

std::string rank_cache_dir(const std::string& dir, int rank, int ranks) {
  if (ranks <= 1) return dir;
  return dir + "/rank-" + std::to_string(rank) + "-of-" + std::to_string(ranks);
}

// "host N\nssd N\ndir " then the directory as it is, to the end (it may hold anything,
// newlines included).
std::string TierSetup::encode() const {
  return "host " + std::to_string(host_bytes) + "\nssd " + std::to_string(ssd_bytes) + "\ndir " +
         dir;
}

TierSetup TierSetup::decode(const std::string& words) {
  TierSetup s;
  std::istringstream in(words);
  std::string host, ssd;
  check(std::getline(in, host) && std::getline(in, ssd) && host.rfind("host ", 0) == 0 &&
            ssd.rfind("ssd ", 0) == 0,
        ErrorKind::internal, "malformed tier setup message");
  s.host_bytes = std::stoull(host.substr(5));
  s.ssd_bytes = std::stoull(ssd.substr(4));
  const size_t at = host.size() + ssd.size() + 2;
  check(at <= words.size() && words.compare(at, 4, "dir ") == 0, ErrorKind::internal,
        "malformed tier setup message");
  s.dir = words.substr(at + 4);
  return s;
}

void FollowerTiers::close() {
  mover_.reset();
  if (host_ && ssd_) host_->flush();  // a restart finds it all on SSD
  host_.reset();
  ssd_.reset();
}

FollowerTiers::~FollowerTiers() {
  try {
    close();
  } catch (const std::exception& e) {
    log_warn("rank ", model_.rank(), ": flushing the host tier failed: ", e.what());
  }
}

bool FollowerTiers::move(const BlockMove& m, const StateViews& state) {
  if (m.op == BlockMove::Op::close) {
    close();
    return true;
  }
  if (m.op == BlockMove::Op::open) {
    close();
    const TierSetup s = TierSetup::decode(m.setup);
    if (!s.dir.empty()) {
      SsdStoreOptions so;
      so.dir = rank_cache_dir(s.dir, model_.rank(), model_.ranks());
      so.capacity_bytes = s.ssd_bytes;
      so.model_fingerprint = model_.fingerprint();
      ssd_ = std::make_unique<SsdStore>(so);  // throws when it cannot: the ranks agree on false
    }
    if (s.host_bytes > 0) host_ = std::make_unique<HostStore>(s.host_bytes, ssd_.get());
    BlockStore* lower = host_ ? static_cast<BlockStore*>(host_.get()) : ssd_.get();
    mover_ = std::make_unique<PoolBlockMover>(lower);
    return true;
  }
  return mover_ && mover_->move(m, state);
}

}  // namespace hibana
