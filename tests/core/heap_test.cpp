#include "core/heap.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

namespace hibana {
namespace {

TEST(Heap, CountsWhatIsHeldAndGivesItBack) {
  const int64_t before = heap_bytes_in_use();
  ASSERT_GT(before, 0);
  constexpr size_t kBytes = size_t(48) << 20;
  auto block = std::make_unique<char[]>(kBytes);
  std::memset(block.get(), 1, kBytes);  // (a lazy allocator could not hide it either way)
  const int64_t held = heap_bytes_in_use();
  EXPECT_GE(held - before, static_cast<int64_t>(kBytes));
  block.reset();
  EXPECT_LT(heap_bytes_in_use(), held - static_cast<int64_t>(kBytes) / 2);
}

}  // namespace
}  // namespace hibana
