#include "core/host_bytes.h"

#include "core/device_memory.h"

namespace hibana {

HostBytes::HostBytes(size_t size) : size_(size) {
  pinned_ = static_cast<uint8_t*>(allocate_pinned(size));
  if (!pinned_) heap_.resize(size);
}

HostBytes::HostBytes(std::vector<uint8_t> heap) : heap_(std::move(heap)), size_(heap_.size()) {}

HostBytes::~HostBytes() {
  release_pinned(pinned_, size_);
}

}  // namespace hibana
