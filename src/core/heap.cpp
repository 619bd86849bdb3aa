#include "core/heap.h"

#if defined(__SANITIZE_ADDRESS__)
#define HIBANA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HIBANA_ASAN 1
#endif
#endif

#if defined(HIBANA_ASAN)
#include <cstddef>
// The sanitizer runtime's allocator statistics (GCC ships no header declaring them).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#elif defined(__GLIBC__)
#include <malloc.h>
#endif

namespace hibana {

int64_t heap_bytes_in_use() {
#if defined(HIBANA_ASAN)
  return static_cast<int64_t>(__sanitizer_get_current_allocated_bytes());
#elif defined(__GLIBC__)
  const struct mallinfo2 mi = mallinfo2();
  return static_cast<int64_t>(mi.uordblks + mi.hblkhd);
#else
  return -1;  // not known on this C library
#endif
}

}  // namespace hibana
