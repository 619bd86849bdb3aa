// How much of the process heap is allocated (live), as the allocator counts it: the figure
// that says whether memory comes back after load. RSS cannot say it under AddressSanitizer,
// whose allocator keeps freed memory (quarantine, size-class caches) without returning it to
// the system.
#pragma once

#include <cstdint>

namespace hibana {

// Bytes currently allocated through malloc/new: glibc's mallinfo2 (arena and mmapped blocks
// in use), or the sanitizer allocator's count in an ASan build.
int64_t heap_bytes_in_use();

}  // namespace hibana
