#include "state/prefix_cache.h"

#include <algorithm>

#include "core/error.h"

namespace hibana {

namespace {
// How many recency ticks a checkpointed node is worth: it saves a whole re-prefill of its
// prefix on a hybrid model, so it outlives plain KV blocks of similar age.
constexpr uint64_t kCheckpointCredit = 256;
}  // namespace

PrefixCache::PrefixCache(StatePool& pool, Backend& backend, uint64_t fingerprint,
                         int64_t checkpoint_slots)
    : pool_(pool),
      backend_(backend),
      fingerprint_(fingerprint),
      hybrid_(pool.spec().deltanet_layers > 0),
      free_checkpoint_slots_(hybrid_ ? checkpoint_slots : 0) {}

PrefixCache::~PrefixCache() {
  for (auto& [key, n] : nodes_) {
    if (n.page >= 0) pool_.free_page(n.page);
    if (n.checkpoint >= 0) pool_.free_slot(n.checkpoint);
  }
  for (int32_t s : spare_slots_) pool_.free_slot(s);
}

BlockKey PrefixCache::key_at(std::span<const int32_t> tokens, int64_t blocks) const {
  const int64_t ps = pool_.page_size();
  BlockKey k{};
  for (int64_t i = 0; i < blocks; ++i) k = BlockKey::chain(k, tokens.subspan(i * ps, ps), fingerprint_);
  return k;
}

void PrefixCache::copy_state(int32_t from, int32_t to) {
  const StateViews& v = pool_.views();
  for (size_t l = 0; l < v.conv.size(); ++l) {
    backend_.copy_slot(v.conv[l], from, to);
    backend_.copy_slot(v.ssm[l], from, to);
  }
}

PrefixMatch PrefixCache::lookup(std::span<const int32_t> tokens) {
  const int64_t ps = pool_.page_size();
  const int64_t n = static_cast<int64_t>(tokens.size());
  PrefixMatch m;
  stats_.query_tokens += static_cast<uint64_t>(n);
  if (n < 2) return m;
  const int64_t max_blocks = (n - 1) / ps;  // leave at least one token to compute
  BlockKey k{};
  std::vector<const BlockKey*> chain;
  std::vector<BlockKey> keys;
  keys.reserve(max_blocks);
  int64_t usable = 0;
  for (int64_t i = 0; i < max_blocks; ++i) {
    k = BlockKey::chain(k, tokens.subspan(i * ps, ps), fingerprint_);
    auto it = nodes_.find(k);
    if (it == nodes_.end() || it->second.page < 0) break;
    keys.push_back(k);
    if (!hybrid_ || it->second.checkpoint >= 0) usable = i + 1;
  }
  if (usable == 0) return m;
  const uint64_t now = ++clock_;
  for (int64_t i = 0; i < usable; ++i) {
    Node& node = nodes_.at(keys[i]);
    node.last_use = now;
    pool_.retain_page(node.page);
    m.pages.push_back(node.page);
  }
  m.tokens = usable * ps;
  if (hybrid_) m.checkpoint_slot = nodes_.at(keys[usable - 1]).checkpoint;
  stats_.hit_tokens += static_cast<uint64_t>(m.tokens);
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
  for (auto& [key, n] : nodes_) {
    if (n.checkpoint >= 0 && (!victim || n.last_use < victim->last_use)) victim = &n;
  }
  if (!victim) return -1;
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
    remove(*best);
    ++freed;
  }
  return freed;
}

PrefixCacheStats PrefixCache::stats() const { return stats_; }

}  // namespace hibana
