// Bytes of a state block in host memory: page-locked where the GPU backend provides it (its
// copies to and from the device then go straight from and to it), ordinary heap memory
// otherwise. Not copyable: blocks are shared (BlockBytes), never duplicated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace hibana {

class HostBytes {
 public:
  // `size` bytes, page-locked when the GPU backend can give them (contents undefined).
  explicit HostBytes(size_t size);
  // Adopts heap bytes (a block read from disk, say): no copy.
  explicit HostBytes(std::vector<uint8_t> heap);
  ~HostBytes();
  HostBytes(const HostBytes&) = delete;
  HostBytes& operator=(const HostBytes&) = delete;

  uint8_t* data() { return pinned_ ? pinned_ : heap_.data(); }
  const uint8_t* data() const { return pinned_ ? pinned_ : heap_.data(); }
  size_t size() const { return size_; }
  std::span<const uint8_t> span() const { return {data(), size_}; }
  bool pinned() const { return pinned_ != nullptr; }

 private:
  std::vector<uint8_t> heap_;
  uint8_t* pinned_ = nullptr;
  size_t size_ = 0;
};

}  // namespace hibana
