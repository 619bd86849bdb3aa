// Copies between device memory and host memory for the state tiers (the CUDA backend's
// DeviceMemory::copy_batch, allocate_pinned and release_pinned): batched on a copy stream of
// their own, ordered against the compute stream by events; straight from and to page-locked
// host buffers, or through a pinned staging buffer when the host side is ordinary memory.
#pragma once

#include <cstddef>
#include <vector>

#include "core/device_memory.h"

namespace hibana::cuda::host_copies {

// All copies in one direction (see DeviceMemory::copy_batch); returns once they are done.
void copy_batch(const std::vector<ByteCopy>& copies, bool to_host);
// Page-locked host memory (reused by size), or nullptr when none can be had.
void* allocate_pinned(size_t bytes);
void release_pinned(void* p, size_t bytes);

}  // namespace hibana::cuda::host_copies
