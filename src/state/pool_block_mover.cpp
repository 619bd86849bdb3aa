#include "state/pool_block_mover.h"

#include "core/device_memory.h"

namespace hibana {

namespace {

// The tensors a block of this kind spans, in payload order: K then V of every attention layer
// (pages), conv then delta state of every DeltaNet layer (slots).
std::vector<const Tensor*> parts(const StateViews& v, bool page) {
  std::vector<const Tensor*> out;
  const std::vector<Tensor>& a = page ? v.k_pages : v.conv;
  const std::vector<Tensor>& b = page ? v.v_pages : v.ssm;
  for (size_t l = 0; l < a.size(); ++l) {
    out.push_back(&a[l]);
    out.push_back(&b[l]);
  }
  return out;
}

size_t row_bytes(const Tensor& t) {
  return t.nbytes() / static_cast<size_t>(t.shape[0]);
}

size_t block_bytes(const StateViews& v, bool page) {
  size_t n = 0;
  for (const Tensor* t : parts(v, page)) n += row_bytes(*t);
  return n;
}

// Each layer's row of the block in the pool and its offset in the payload.
struct Part {
  uint8_t* row;
  size_t off, bytes;
};
std::vector<Part> block_parts(const StateViews& v, bool page, int32_t index) {
  std::vector<Part> out;
  size_t off = 0;
  for (const Tensor* t : parts(v, page)) {
    const size_t per = row_bytes(*t);
    out.push_back({static_cast<uint8_t*>(t->data) + per * index, off, per});
    off += per;
  }
  return out;
}

Device pool_device(const StateViews& v, bool page) {
  const std::vector<Tensor>& a = page ? v.k_pages : v.conv;
  return a.empty() ? Device::cpu : a.front().device;
}

// A block is copied between the pool (host memory on the CPU backend, device memory on CUDA)
// and its host buffer as one batch of per-layer copies (on CUDA: one synchronisation per block,
// through pinned staging on a copy stream).
BlockBytes pack(const StateViews& v, bool page, int32_t index) {
  auto out = std::make_shared<HostBytes>(block_bytes(v, page));
  std::vector<ByteCopy> copies;
  for (const Part& p : block_parts(v, page, index))
    copies.push_back({out->data() + p.off, p.row, p.bytes});
  copy_batch(pool_device(v, page), copies, true);
  return out;
}

void unpack(const StateViews& v, bool page, int32_t index, std::span<const uint8_t> bytes) {
  std::vector<ByteCopy> copies;
  for (const Part& p : block_parts(v, page, index))
    copies.push_back({p.row, bytes.data() + p.off, p.bytes});
  copy_batch(pool_device(v, page), copies, false);
}

}  // namespace

size_t PoolBlockMover::page_bytes(const StateViews& state) {
  return block_bytes(state, true);
}

size_t PoolBlockMover::slot_bytes(const StateViews& state) {
  return block_bytes(state, false);
}

bool PoolBlockMover::move(const BlockMove& m, const StateViews& state) {
  using Op = BlockMove::Op;
  if (m.op == Op::open || m.op == Op::close) return true;
  if (!lower_) return false;
  const BlockKey key{m.key_hi, m.key_lo};
  switch (m.op) {
    case Op::save_page:
    case Op::save_slot:
      return lower_->put_shared(key, m.kind, pack(state, m.op == Op::save_page, m.index));
    case Op::load_page:
    case Op::load_slot: {
      const bool page = m.op == Op::load_page;
      const BlockBytes bytes = lower_->get_shared(key, m.kind);
      if (!bytes || bytes->size() != block_bytes(state, page)) return false;
      unpack(state, page, m.index, bytes->span());
      return true;
    }
    case Op::forget:
      lower_->clear_block(key);
      return true;
    default:
      return false;
  }
}

}  // namespace hibana
