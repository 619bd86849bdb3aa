// What rank 0 tells the other ranks about its tiers survives the trip whatever the directory's
// name holds.
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine/rank_tiers.h"

namespace hibana {
namespace {

TEST(TierSetup, RoundTripsAnyDirectoryName) {
  for (const std::string dir : {"", "/tmp/cache", "/tmp/with space", "/tmp/two\nlines",
                                "/tmp/ends with newline\n", "/tmp/dir host 5\nssd 7"}) {
    TierSetup s;
    s.host_bytes = 123;
    s.ssd_bytes = uint64_t(9) << 40;
    s.dir = dir;
    const TierSetup back = TierSetup::decode(s.encode());
    EXPECT_EQ(back.host_bytes, 123u) << dir;
    EXPECT_EQ(back.ssd_bytes, uint64_t(9) << 40) << dir;
    EXPECT_EQ(back.dir, dir);
  }
}

TEST(TierSetup, AMalformedMessageIsAnError) {
  for (const std::string bad :
       {"", "host 1", "host 1\nssd 2", "host 1\nssd 2\ndi", "ssd 2\nhost 1\ndir x"}) {
    EXPECT_THROW(TierSetup::decode(bad), Error) << bad;
  }
}

TEST(RankCacheDir, OneRankKeepsTheDirectoryManyGetTheirOwn) {
  EXPECT_EQ(rank_cache_dir("/c", 0, 1), "/c");
  EXPECT_EQ(rank_cache_dir("/c", 1, 2), "/c/rank-1-of-2");
}

}  // namespace
}  // namespace hibana
