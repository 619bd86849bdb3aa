#include "tokenizer/bpe.h"

#include <algorithm>
#include <bit>
#include <functional>
#include <string>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/string_index.h"
#include "tokenizer/utf8.h"

namespace hibana {

BpeModel::BpeModel(const TokenizerSpec& spec) {
  // Later duplicates win, as when tokenizers collects the vocabulary into a HashMap.
  StringIndex by_text;
  by_text.reserve(spec.vocab.size());
  for (const auto& [text, id] : spec.vocab) by_text.insert(text, id);

  const auto& chars = byte_level::byte_to_char();
  std::string one;
  for (int b = 0; b < 256; ++b) {
    one.clear();
    utf8::append_codepoint(chars[b], one);
    byte_ids_[b] = by_text.find(one).value_or(-1);
  }

  size_t capacity = 16;
  while (capacity < spec.merges.size() * 2) capacity *= 2;
  pairs_.assign(capacity, Pair{kEmpty, 0, 0});
  mask_ = capacity - 1;
  shift_ = 64 - std::countr_zero(capacity);

  std::string joined;
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    // Not a structured binding: clang 14 cannot capture those in a lambda.
    const std::string& left = spec.merges[rank].first;
    const std::string& right = spec.merges[rank].second;
    auto missing = [&](const std::string& what) {
      return Error(ErrorKind::corrupt_data, spec.source + ": merge " + std::to_string(rank + 1) +
                                                " ('" + left + " " + right + "') " + what);
    };
    const std::optional<int32_t> a = by_text.find(left);
    if (!a) throw missing("names '" + left + "', which is not in the vocabulary");
    const std::optional<int32_t> b = by_text.find(right);
    if (!b) throw missing("names '" + right + "', which is not in the vocabulary");
    joined.assign(left).append(right);
    const std::optional<int32_t> merged = by_text.find(joined);
    if (!merged) throw missing("makes '" + joined + "', which is not in the vocabulary");
    insert(*a, *b, static_cast<uint32_t>(rank), *merged);
  }
  merge_count_ = spec.merges.size();
}

void BpeModel::insert(int32_t a, int32_t b, uint32_t rank, int32_t merged) {
  const uint64_t key = pair_key(a, b);
  for (size_t s = slot_of(key);; s = (s + 1) & mask_) {
    Pair& p = pairs_[s];
    if (p.key == kEmpty || p.key == key) {
      // A pair listed twice keeps its last rank, as tokenizers' merge map does.
      p = Pair{key, rank, merged};
      return;
    }
  }
}

void BpeModel::encode(std::string_view word, Scratch& scratch, std::vector<int32_t>& out) const {
  if (word.size() <= 48) {
    encode_short(word, scratch, out);
  } else {
    encode_long(word, scratch, out);
  }
}

void BpeModel::encode_short(std::string_view word, Scratch& scratch,
                            std::vector<int32_t>& out) const {
  auto& ids = scratch.ids;
  ids.clear();
  for (char c : word) {
    const int32_t id = byte_ids_[static_cast<unsigned char>(c)];
    if (id >= 0) ids.push_back(id);  // tokenizers drops characters it has no token for
  }
  if (ids.size() <= 1) {
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  auto& pairs = scratch.pairs;
  pairs.clear();
  for (size_t i = 0; i + 1 < ids.size(); ++i) pairs.push_back(merge_of(ids[i], ids[i + 1]));
  // The lowest (rank, merged) value is the lowest rank; the first such position is the
  // leftmost, the order tokenizers' queue of (rank, position) gives.
  while (!pairs.empty()) {
    size_t best = 0;
    for (size_t i = 1; i < pairs.size(); ++i) {
      if (pairs[i] < pairs[best]) best = i;
    }
    if (pairs[best] == kNoMerge) break;
    ids[best] = static_cast<int32_t>(pairs[best] & 0xFFFFFFFFu);
    ids.erase(ids.begin() + static_cast<ptrdiff_t>(best) + 1);
    pairs.erase(pairs.begin() + static_cast<ptrdiff_t>(best));
    if (best > 0) pairs[best - 1] = merge_of(ids[best - 1], ids[best]);
    if (best < pairs.size()) pairs[best] = merge_of(ids[best], ids[best + 1]);
  }
  out.insert(out.end(), ids.begin(), ids.end());
}

void BpeModel::encode_long(std::string_view word, Scratch& scratch,
                           std::vector<int32_t>& out) const {
  auto& symbols = scratch.symbols;
  symbols.clear();
  for (char c : word) {
    const int32_t id = byte_ids_[static_cast<unsigned char>(c)];
    if (id < 0) continue;  // tokenizers drops characters it has no token for (no unk token)
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, true});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;
  if (symbols.size() == 1) {
    out.push_back(symbols[0].id);
    return;
  }

  auto& queue = scratch.queue;
  queue.clear();
  auto push = [&](uint32_t rank, int32_t position) {
    queue.push_back((uint64_t{rank} << 32) | uint32_t(position));
    std::push_heap(queue.begin(), queue.end(), std::greater<>());
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const Pair* p = find(symbols[i].id, symbols[i + 1].id)) {
      queue.push_back((uint64_t{p->rank} << 32) | uint32_t(i));
    }
  }
  std::make_heap(queue.begin(), queue.end(), std::greater<>());

  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), std::greater<>());
    const uint64_t top = queue.back();
    queue.pop_back();
    const auto rank = static_cast<uint32_t>(top >> 32);
    const auto position = static_cast<int32_t>(top & 0xFFFFFFFFu);
    auto& left = symbols[position];
    if (!left.alive || left.next < 0) continue;
    auto& right = symbols[left.next];
    // The queue entry is stale when either side has changed since it was pushed.
    const Pair* p = find(left.id, right.id);
    if (!p || p->rank != rank) continue;
    left.id = p->merged;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = position;
    if (left.prev >= 0) {
      if (const Pair* q = find(symbols[left.prev].id, left.id)) push(q->rank, left.prev);
    }
    if (left.next >= 0) {
      if (const Pair* q = find(left.id, symbols[left.next].id)) push(q->rank, position);
    }
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace hibana
