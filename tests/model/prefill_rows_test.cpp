// Which rows of a pass are prefill rows (layout.h's prefill_rows, Backend::set_prefill_rows):
// the tokens whose aligned block of 64 positions their sequence's pass covers whole. The CUDA
// backend runs those rows' products in other arithmetic, so the rule is what keeps a token's
// bits independent of the batch and of how a prompt is cut into chunks of whole blocks.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "model/layout.h"

namespace hibana {
namespace {

using Rows = std::vector<Backend::RowRange>;

// A pass of sequences given as {tokens, start position}.
Rows rows_of(std::initializer_list<std::pair<int64_t, int64_t>> seqs,
             GdnMode mode = GdnMode::aligned_chunks) {
  std::vector<SeqDesc> d;
  for (auto [n, start] : seqs) d.push_back({n, start, {}, -1, {}});
  return prefill_rows(d, mode);
}

bool same(const Rows& a, const Rows& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].begin != b[i].begin || a[i].end != b[i].end) return false;
  }
  return true;
}

TEST(PrefillRows, TheWholeBlocksOfEachSequence) {
  EXPECT_TRUE(same(rows_of({{150, 0}}), {{0, 128}}));
  EXPECT_TRUE(same(rows_of({{64, 64}}), {{0, 64}}));
  // Positions 100-199: only [128, 192) is whole, rows 28-91.
  EXPECT_TRUE(same(rows_of({{100, 100}}), {{28, 92}}));
  // A batch: 37 tokens (none), 150 from 0 (rows 37-164), a decode token.
  EXPECT_TRUE(same(rows_of({{37, 0}, {150, 0}, {1, 20}}), {{37, 165}}));
  // Adjacent sequences' ranges join; a gap keeps them apart.
  EXPECT_TRUE(same(rows_of({{64, 0}, {64, 128}}), {{0, 128}}));
  EXPECT_TRUE(same(rows_of({{70, 0}, {64, 128}}), {{0, 64}, {70, 134}}));
}

TEST(PrefillRows, NoneForDecodeShortPassesOrTheRecurrentMode) {
  EXPECT_TRUE(rows_of({{1, 500}, {1, 63}, {1, 0}}).empty());
  EXPECT_TRUE(rows_of({{63, 0}}).empty());
  EXPECT_TRUE(rows_of({{64, 1}}).empty());    // positions 1-64: no block whole
  EXPECT_TRUE(rows_of({{8, 2040}}).empty());  // a verification pass
  EXPECT_TRUE(rows_of({{150, 0}}, GdnMode::recurrent).empty());
}

// The positions a prompt's passes run as prefill rows do not depend on how it is cut, as long as
// the cuts fall on multiples of 64: the same set for one pass and for the aligned splits the
// batch-invariance tests use.
TEST(PrefillRows, AlignedSplitsCoverTheSamePositions) {
  auto positions = [](std::initializer_list<int64_t> splits) {
    std::set<int64_t> covered;
    int64_t start = 0;
    for (int64_t n : splits) {
      for (const Backend::RowRange& r : rows_of({{n, start}})) {
        for (int64_t i = r.begin; i < r.end; ++i) covered.insert(start + i);
      }
      start += n;
    }
    return covered;
  };
  const std::set<int64_t> one = positions({200});
  EXPECT_EQ(one.size(), 192u);
  EXPECT_EQ(positions({64, 128, 8}), one);
  EXPECT_EQ(positions({128, 64, 1, 1, 1, 1, 1, 1, 1, 1}), one);
  // A cut off the blocks (at 100) loses the block it splits, [64, 128).
  EXPECT_EQ(positions({100, 100}).size(), 128u);
}

}  // namespace
}  // namespace hibana
