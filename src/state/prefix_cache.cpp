#include "state/prefix_cache.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/device_memory.h"
#include "core/error.h"
#include "core/log.h"
#include "model/model.h"

namespace hibana {

namespace {
// How many recency ticks a checkpointed node is worth: it saves a whole re-prefill of its
// prefix on a hybrid model, so it outlives plain KV blocks of similar age.
constexpr uint64_t kCheckpointCredit = 256;
}  // namespace

PrefixCache::PrefixCache(StatePool& pool, const StateOps& ops, uint64_t fingerprint,
                         int64_t checkpoint_slots, BlockStore* lower, TierCosts costs)
    : pool_(pool),
      ops_(ops),
      fingerprint_(fingerprint),
      hybrid_(pool.spec().deltanet_layers > 0),
      free_checkpoint_slots_(hybrid_ ? checkpoint_slots : 0),
      lower_(lower),
      mover_(lower),
      costs_(costs) {}

PrefixCache::PrefixCache(StatePool& pool, Backend& backend, uint64_t fingerprint,
                         int64_t checkpoint_slots, BlockStore* lower, TierCosts costs)
    : PrefixCache(pool, std::make_unique<BackendStateOps>(backend), fingerprint, checkpoint_slots,
                  lower, costs) {}

PrefixCache::PrefixCache(StatePool& pool, std::unique_ptr<StateOps> own, uint64_t fingerprint,
                         int64_t checkpoint_slots, BlockStore* lower, TierCosts costs)
    : PrefixCache(pool, *own, fingerprint, checkpoint_slots, lower, costs) {
  own_ops_ = std::move(own);  // ops_ refers to it: the object stays where it is
}

size_t PrefixCache::page_bytes() const {
  return PoolBlockMover::page_bytes(pool_.views());
}

size_t PrefixCache::slot_bytes() const {
  return PoolBlockMover::slot_bytes(pool_.views());
}

bool PrefixCache::move(BlockMove::Op op, const BlockKey& key, uint32_t kind, int32_t index) {
  BlockMove m;
  m.op = op;
  m.key_hi = key.hi;
  m.key_lo = key.lo;
  m.kind = kind;
  m.index = index;
  return ops_.move_block(pool_.views(), mover_, m);
}

bool PrefixCache::held_below(bool claimed, const BlockKey& key) const {
  // A claim can outlive its copy (the host tier failed to write it down to the SSD, the SSD
  // evicted it or found it damaged): ask the tiers before trusting it.
  return claimed && lower_->contains(key);
}

void PrefixCache::spill(const BlockKey& key, Node& node) {
  if (!lower_) return;
  node.kv_on_ssd = held_below(node.kv_on_ssd, key);
  node.checkpoint_on_ssd = held_below(node.checkpoint_on_ssd, checkpoint_key(key));
  if (node.page >= 0 && !node.kv_on_ssd) {
    if (move(BlockMove::Op::save_page, key, kKindKv, node.page)) {
      node.kv_on_ssd = true;
      stats_.spilled_bytes += page_bytes();
      ++stats_.spilled_blocks;
    }
  }
  if (node.checkpoint >= 0 && !node.checkpoint_on_ssd) {
    if (move(BlockMove::Op::save_slot, checkpoint_key(key), kKindCheckpoint, node.checkpoint)) {
      node.checkpoint_on_ssd = true;
      stats_.spilled_bytes += slot_bytes();
    }
  }
}

void PrefixCache::flush() {
  for (auto& [key, node] : nodes_) spill(key, node);
}

PrefixCache::~PrefixCache() {
  for (auto& [key, n] : nodes_) {
    if (n.page >= 0) pool_.free_page(n.page);
    if (n.checkpoint >= 0) pool_.free_slot(n.checkpoint);
  }
  for (int32_t s : spare_slots_) pool_.free_slot(s);
}

std::vector<PrefixCache::BlockRef> PrefixCache::chain_blocks(std::span<const int32_t> tokens,
                                                             int64_t page_size,
                                                             uint64_t fingerprint, bool hybrid) {
  std::vector<BlockRef> out;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t blocks = n < 2 ? 0 : (n - 1) / page_size;  // as lookup(): one token stays
  BlockKey k{};
  for (int64_t i = 0; i < blocks; ++i) {
    k = BlockKey::chain(k, tokens.subspan(i * page_size, page_size), fingerprint);
    out.push_back({k, kKindKv, i});
    if (hybrid) out.push_back({checkpoint_key(k), kKindCheckpoint, i});
  }
  return out;
}

PrefixCache::DeviceCoverage PrefixCache::device_coverage(std::span<const int32_t> tokens) const {
  DeviceCoverage c;
  const int64_t ps = pool_.page_size();
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t blocks = n < 2 ? 0 : (n - 1) / ps;  // as lookup()
  BlockKey k{};
  for (int64_t i = 0; i < blocks; ++i) {
    k = BlockKey::chain(k, tokens.subspan(i * ps, ps), fingerprint_);
    auto it = nodes_.find(k);
    if (it == nodes_.end() || it->second.page < 0) break;
    c.blocks = i + 1;
    if (it->second.checkpoint >= 0) c.checkpoint = i + 1;
  }
  return c;
}

BlockKey PrefixCache::key_at(std::span<const int32_t> tokens, int64_t blocks) const {
  const int64_t ps = pool_.page_size();
  BlockKey k{};
  for (int64_t i = 0; i < blocks; ++i)
    k = BlockKey::chain(k, tokens.subspan(i * ps, ps), fingerprint_);
  return k;
}

void PrefixCache::copy_state(int32_t from, int32_t to) {
  ops_.copy_recurrent_slot(pool_.views(), from, to);
}

PrefixMatch PrefixCache::lookup(std::span<const int32_t> tokens) {
  const int64_t ps = pool_.page_size();
  const int64_t n = static_cast<int64_t>(tokens.size());
  PrefixMatch m;
  stats_.query_tokens += static_cast<uint64_t>(n);
  if (n < 2) return m;
  const int64_t max_blocks = (n - 1) / ps;  // leave at least one token to compute

  // Walk the chain through the device tier and, past it, the SSD tier.
  struct Level {
    BlockKey key;
    bool kv_device, ckpt_device, ckpt_ssd;
  };
  std::vector<Level> levels;
  int64_t usable_device = 0, usable_any = 0;
  bool device_unbroken = true;
  BlockKey k{};
  for (int64_t i = 0; i < max_blocks; ++i) {
    k = BlockKey::chain(k, tokens.subspan(i * ps, ps), fingerprint_);
    auto it = nodes_.find(k);
    const bool kv_device = it != nodes_.end() && it->second.page >= 0;
    if (!kv_device && !(lower_ && lower_->contains(k))) break;
    Level lv{k, kv_device, kv_device && it->second.checkpoint >= 0, false};
    if (hybrid_ && !lv.ckpt_device && lower_) lv.ckpt_ssd = lower_->contains(checkpoint_key(k));
    device_unbroken = device_unbroken && kv_device;
    if (!hybrid_ || lv.ckpt_device || lv.ckpt_ssd) usable_any = i + 1;
    if (device_unbroken && (!hybrid_ || lv.ckpt_device)) usable_device = i + 1;
    levels.push_back(lv);
  }
  int64_t target = usable_device;
  if (usable_any > usable_device) {
    // Restore from the lower tiers only when loading beats recomputing; blocks in host RAM
    // load at the host rate, the others at the disk's.
    double ram_bytes = 0, disk_bytes = 0;
    auto price = [&](const BlockKey& key, size_t bytes) {
      (lower_->in_memory(key) ? ram_bytes : disk_bytes) += static_cast<double>(bytes);
    };
    for (int64_t i = 0; i < usable_any; ++i) {
      if (!levels[i].kv_device) price(levels[i].key, page_bytes());
    }
    if (hybrid_ && !levels[usable_any - 1].ckpt_device) {
      price(checkpoint_key(levels[usable_any - 1].key), slot_bytes());
    }
    auto seconds = [](double bytes, double rate) { return rate > 0 ? bytes / rate : 0.0; };
    const double load = seconds(ram_bytes, costs_.host_read_bytes_per_second) +
                        seconds(disk_bytes, costs_.ssd_read_bytes_per_second);
    const double recompute = costs_.prefill_tokens_per_second > 0
                                 ? static_cast<double>((usable_any - usable_device) * ps) /
                                       costs_.prefill_tokens_per_second
                                 : 1e30;
    if (load < recompute) {
      target = usable_any;
    } else {
      ++stats_.restores_declined;
    }
  }
  if (target == 0) return m;

  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t now = ++clock_;
  uint64_t restored = 0;
  std::vector<bool> from_below(target, false);  // restored from a lower tier, by level
  BlockKey parent{};
  for (int64_t i = 0; i < target; ++i) {
    const Level& lv = levels[i];
    auto it = nodes_.find(lv.key);
    if (it == nodes_.end() || it->second.page < 0) {
      // Bring the block back from the SSD tier into a fresh page (on every rank of a
      // tensor-parallel model, which all agree that it came back before it is used).
      if (pool_.free_pages() == 0) evict_pages(1);
      if (pool_.free_pages() == 0) {
        target = i;  // no room: stop here
        break;
      }
      const int32_t page = pool_.alloc_page();
      if (!move(BlockMove::Op::load_page, lv.key, kKindKv, page)) {
        // Corrupt or gone (on some rank): no rank keeps it, and the chain stops here.
        pool_.free_page(page);
        move(BlockMove::Op::forget, lv.key, kKindKv, -1);
        target = i;
        break;
      }
      auto [nit, fresh] = nodes_.try_emplace(lv.key);
      Node& node = nit->second;
      if (fresh) {
        node.parent = parent;
        node.depth = i + 1;
        if (i > 0) ++nodes_.at(parent).children;
        ++stats_.nodes;
      }
      node.page = page;  // the node holds the allocation's reference
      node.kv_on_ssd = true;
      ++stats_.pages;
      ++stats_.restored_blocks;
      stats_.restored_bytes += page_bytes();
      restored += static_cast<uint64_t>(ps);
      from_below[i] = true;
      it = nit;
    }
    it->second.last_use = now;
    pool_.retain_page(it->second.page);
    m.pages.push_back(it->second.page);
    parent = lv.key;
  }
  // Hybrid models resume only at a checkpoint: the deepest one within the restored chain.
  int64_t depth = static_cast<int64_t>(m.pages.size());
  if (hybrid_) {
    int64_t chosen = 0;
    for (int64_t d = depth; d > 0 && chosen == 0; --d) {
      Node& node = nodes_.at(levels[d - 1].key);
      if (node.checkpoint >= 0) {
        chosen = d;
      } else if (levels[d - 1].ckpt_ssd) {
        const BlockKey ck = checkpoint_key(levels[d - 1].key);
        int32_t slot = take_checkpoint_slot();
        if (slot >= 0 && move(BlockMove::Op::load_slot, ck, kKindCheckpoint, slot)) {
          node.checkpoint = slot;
          node.checkpoint_on_ssd = true;
          ++stats_.checkpoints;
          stats_.restored_bytes += slot_bytes();
          chosen = d;
        } else if (slot >= 0) {
          spare_slots_.push_back(slot);
          move(BlockMove::Op::forget, ck, kKindCheckpoint, -1);
        }
      }
    }
    for (int64_t d = depth; d > chosen; --d) pool_.free_page(m.pages[d - 1]);
    m.pages.resize(chosen);
    depth = chosen;
    if (chosen > 0) m.checkpoint_slot = nodes_.at(levels[chosen - 1].key).checkpoint;
  }
  if (restored > 0) {
    stats_.restore_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  m.tokens = depth * ps;
  stats_.hit_tokens += static_cast<uint64_t>(m.tokens);
  // Only the blocks the match resumes from count, each for the tier it came from (a hybrid
  // match can end at a device checkpoint above blocks it restored).
  const uint64_t from_ssd =
      static_cast<uint64_t>(std::count(from_below.begin(), from_below.begin() + depth, true) * ps);
  stats_.ssd_hit_tokens += from_ssd;
  stats_.device_hit_tokens += static_cast<uint64_t>(m.tokens) - from_ssd;
  return m;
}

int32_t PrefixCache::take_checkpoint_slot() {
  if (!spare_slots_.empty()) {
    int32_t s = spare_slots_.back();
    spare_slots_.pop_back();
    return s;
  }
  if (free_checkpoint_slots_ > 0 && pool_.free_slots() > 0) {
    --free_checkpoint_slots_;
    return pool_.alloc_slot();
  }
  // Reuse the least recently used checkpoint (its node keeps its KV).
  Node* victim = nullptr;
  const BlockKey* victim_key = nullptr;
  for (auto& [key, n] : nodes_) {
    if (n.checkpoint >= 0 && (!victim || n.last_use < victim->last_use)) {
      victim = &n;
      victim_key = &key;
    }
  }
  if (!victim) return -1;
  // Write-back before the slot is reused.
  if (lower_ && !held_below(victim->checkpoint_on_ssd, checkpoint_key(*victim_key))) {
    if (move(BlockMove::Op::save_slot, checkpoint_key(*victim_key), kKindCheckpoint,
             victim->checkpoint)) {
      stats_.spilled_bytes += slot_bytes();
    }
  }
  int32_t s = victim->checkpoint;
  victim->checkpoint = -1;
  victim->transient = false;
  ++stats_.evicted_checkpoints;
  --stats_.checkpoints;
  return s;
}

void PrefixCache::insert(std::span<const int32_t> tokens, std::span<const int32_t> pages,
                         int64_t blocks, int32_t state_slot, bool transient) {
  const int64_t ps = pool_.page_size();
  check(blocks <= static_cast<int64_t>(pages.size()) &&
            blocks * ps <= static_cast<int64_t>(tokens.size()),
        ErrorKind::internal, "prefix cache insert beyond the sequence");
  const uint64_t now = ++clock_;
  BlockKey parent{}, k{};
  for (int64_t i = 0; i < blocks; ++i) {
    k = BlockKey::chain(parent, tokens.subspan(i * ps, ps), fingerprint_);
    auto [it, fresh] = nodes_.try_emplace(k);
    Node& node = it->second;
    if (fresh) {
      node.parent = parent;
      node.depth = i + 1;
      if (i > 0) ++nodes_.at(parent).children;
      ++stats_.nodes;
    }
    if (node.page < 0) {
      pool_.retain_page(pages[i]);
      node.page = pages[i];
      ++stats_.pages;
    }
    node.last_use = now;
    parent = k;
  }
  if (state_slot < 0 || blocks == 0 || !hybrid_) return;
  Node& last = nodes_.at(k);
  if (last.checkpoint >= 0) {
    if (!transient) last.transient = false;  // a policy checkpoint outranks a transient one
    return;
  }
  int32_t slot = take_checkpoint_slot();
  if (slot < 0) return;
  copy_state(state_slot, slot);
  last.checkpoint = slot;
  last.transient = transient;
  ++stats_.checkpoints;
}

void PrefixCache::drop_transient(std::span<const int32_t> tokens, int64_t blocks) {
  if (blocks <= 0) return;
  auto it = nodes_.find(key_at(tokens, blocks));
  if (it == nodes_.end() || it->second.checkpoint < 0 || !it->second.transient) return;
  spare_slots_.push_back(it->second.checkpoint);
  it->second.checkpoint = -1;
  it->second.transient = false;
  --stats_.checkpoints;
}

void PrefixCache::remove(const BlockKey& key) {
  auto it = nodes_.find(key);
  Node& n = it->second;
  if (n.page >= 0) {
    pool_.free_page(n.page);
    --stats_.pages;
    ++stats_.evicted_pages;
  }
  if (n.checkpoint >= 0) {
    spare_slots_.push_back(n.checkpoint);
    --stats_.checkpoints;
    ++stats_.evicted_checkpoints;
  }
  if (n.depth > 1) {
    auto p = nodes_.find(n.parent);
    if (p != nodes_.end()) --p->second.children;
  }
  nodes_.erase(it);
  --stats_.nodes;
}

int64_t PrefixCache::evictable_pages() const {
  // Eviction removes leaves only, so a node is freeable when no node of its subtree is in use:
  // mark every in-use node and its ancestors, count the rest.
  std::unordered_map<BlockKey, bool, BlockKeyHash> blocked;
  for (const auto& [key, node] : nodes_) {
    if (node.page < 0 || pool_.page_refs(node.page) == 1) continue;
    BlockKey k = key;
    for (;;) {
      if (blocked[k]) break;
      blocked[k] = true;
      const Node& n = nodes_.at(k);
      if (n.depth <= 1 || !nodes_.count(n.parent)) break;
      k = n.parent;
    }
  }
  int64_t n = 0;
  for (const auto& [key, node] : nodes_) {
    auto b = blocked.find(key);
    if (node.page >= 0 && (b == blocked.end() || !b->second)) ++n;
  }
  return n;
}

int64_t PrefixCache::evict_pages(int64_t want) {
  int64_t freed = 0;
  while (freed < want) {
    const BlockKey* best = nullptr;
    uint64_t best_score = 0;
    for (const auto& [key, node] : nodes_) {
      if (node.children != 0 || node.page < 0 || pool_.page_refs(node.page) != 1) continue;
      const uint64_t score = node.last_use + (node.checkpoint >= 0 ? kCheckpointCredit : 0);
      if (!best || score < best_score) {
        best = &key;
        best_score = score;
      }
    }
    if (!best) break;
    spill(*best, nodes_.at(*best));  // write-back to the next tier
    remove(*best);
    ++freed;
  }
  return freed;
}

PrefixCacheStats PrefixCache::stats() const {
  return stats_;
}

}  // namespace hibana
