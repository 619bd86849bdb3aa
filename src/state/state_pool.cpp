#include "state/state_pool.h"

#include <cstring>

#include "core/device_memory.h"
#include "core/error.h"

namespace hibana {

StatePool::StatePool(const StateSpec& spec, int64_t page_size, int64_t num_pages,
                     int64_t num_slots)
    : spec_(spec), page_size_(page_size), num_pages_(num_pages), num_slots_(num_slots) {
  check(page_size > 0, ErrorKind::invalid_argument, "page size must be positive");
  views_.page_size = page_size;
  auto add = [&](std::vector<Tensor>& list, std::initializer_list<int64_t> dims) {
    Tensor shape(nullptr, DType::f32, dims, spec.device);
    // Not cleared: attention reads only positions it wrote, and slots are zeroed when handed
    // out, so the memory is touched (and committed by the OS) only as it is used.
    buffers_.emplace_back(std::max<size_t>(shape.nbytes(), 64), spec.device);
    shape.data = buffers_.back().data();
    list.push_back(shape);
  };
  if (spec.attention_layers > 0) {
    for (int64_t l = 0; l < spec.attention_layers; ++l) {
      add(views_.k_pages, {num_pages, spec.kv_heads, page_size, spec.head_dim});
      add(views_.v_pages, {num_pages, spec.kv_heads, page_size, spec.head_dim});
    }
    for (int64_t p = num_pages - 1; p >= 0; --p) free_pages_.push_back(static_cast<int32_t>(p));
  }
  if (spec.deltanet_layers > 0) {
    for (int64_t l = 0; l < spec.deltanet_layers; ++l) {
      add(views_.conv, {num_slots, spec.conv_channels, spec.conv_window});
      add(views_.ssm, {num_slots, spec.value_heads, spec.key_dim, spec.value_dim});
    }
    for (int64_t s = num_slots - 1; s >= 0; --s) free_slots_.push_back(static_cast<int32_t>(s));
  }
  page_refs_.assign(num_pages, 0);
  slot_used_.assign(num_slots, 0);
}

size_t StatePool::bytes() const {
  size_t b = 0;
  for (const Buffer& buf : buffers_) b += buf.size();
  return b;
}

int32_t StatePool::alloc_page() {
  if (free_pages_.empty()) {
    throw Error(ErrorKind::out_of_memory,
                "KV cache is full (" + std::to_string(num_pages_) + " pages of " +
                    std::to_string(page_size_) + " tokens)");
  }
  int32_t p = free_pages_.back();
  free_pages_.pop_back();
  page_refs_[p] = 1;
  return p;
}

void StatePool::retain_page(int32_t page) {
  check(page >= 0 && page < num_pages_ && page_refs_[page] > 0, ErrorKind::internal,
        "retaining a page that is not in use");
  ++page_refs_[page];
}

void StatePool::free_page(int32_t page) {
  check(page >= 0 && page < num_pages_ && page_refs_[page] > 0, ErrorKind::internal,
        "freeing a page that is not in use");
  if (--page_refs_[page] == 0) free_pages_.push_back(page);
}

int32_t StatePool::alloc_slot() {
  if (free_slots_.empty()) {
    throw Error(ErrorKind::out_of_memory,
                "no free recurrent-state slot (" + std::to_string(num_slots_) + " in the pool)");
  }
  int32_t s = free_slots_.back();
  free_slots_.pop_back();
  slot_used_[s] = 1;
  clear_slot(s);
  return s;
}

void StatePool::free_slot(int32_t slot) {
  check(slot >= 0 && slot < num_slots_ && slot_used_[slot], ErrorKind::internal,
        "freeing a slot that is not in use");
  slot_used_[slot] = 0;
  free_slots_.push_back(slot);
}

void StatePool::clear_slot(int32_t slot) {
  for (const std::vector<Tensor>* list : {&views_.conv, &views_.ssm}) {
    for (const Tensor& t : *list) {
      const size_t per = t.nbytes() / static_cast<size_t>(t.shape[0]);
      zero_bytes(static_cast<char*>(t.data) + per * slot, t.device, per);
    }
  }
}

SequenceState::SequenceState(StatePool& pool, bool with_slot) : pool_(pool) {
  if (with_slot && pool.spec().deltanet_layers > 0) slot_ = pool.alloc_slot();
}

SequenceState::~SequenceState() {
  for (int32_t p : pages_) pool_.free_page(p);
  if (slot_ >= 0) pool_.free_slot(slot_);
}

void SequenceState::reserve(int64_t positions) {
  if (pool_.spec().attention_layers == 0) return;
  const int64_t need = (positions + pool_.page_size() - 1) / pool_.page_size();
  while (static_cast<int64_t>(pages_.size()) < need) pages_.push_back(pool_.alloc_page());
}

}  // namespace hibana
