// The MPI communicator's collectives, on every rank of the job.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "parallel/mpi_world.h"

namespace hibana {
namespace {

// A value no other (rank, i) gives, with bits that make the order of additions matter.
float value(int rank, int64_t i) {
  return 1.0f / static_cast<float>(3 + 7 * rank + 11 * i) + 1e3f * rank;
}

TEST(MpiCommunicator, AllReduceAddsInRankOrderOnEveryRank) {
  auto comm = test::world();
  ASSERT_GE(comm->size(), 2);
  const int64_t n = 1000;
  std::vector<float> data(n);
  for (int64_t i = 0; i < n; ++i) data[i] = value(comm->rank(), i);
  comm->all_reduce_sum(data.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    float want = value(0, i);
    for (int r = 1; r < comm->size(); ++r) want += value(r, i);
    ASSERT_EQ(data[i], want) << "element " << i;  // the same bits, not just close
  }
}

TEST(MpiCommunicator, AllGatherTakesBlocksOfDifferentSizes) {
  auto comm = test::world();
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (int r = 0; r < comm->size(); ++r) {
    counts.push_back(3 + 2 * r);
    total += counts.back();
  }
  std::vector<float> mine(counts[comm->rank()]);
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = value(comm->rank(), static_cast<int64_t>(i));
  std::vector<float> all(total, -1.0f);
  comm->all_gather(mine.data(), all.data(), counts);
  int64_t at = 0;
  for (int r = 0; r < comm->size(); ++r) {
    for (int64_t i = 0; i < counts[r]; ++i, ++at) ASSERT_EQ(all[at], value(r, i)) << r << "," << i;
  }
}

TEST(MpiCommunicator, BroadcastCopiesTheRootsBytes) {
  auto comm = test::world();
  for (int root = 0; root < comm->size(); ++root) {
    int64_t v[3] = {comm->rank(), 10 * comm->rank(), -1};
    comm->broadcast(v, sizeof v, root);
    EXPECT_EQ(v[0], root);
    EXPECT_EQ(v[1], 10 * root);
    EXPECT_EQ(v[2], -1);
  }
  comm->barrier();
}

}  // namespace
}  // namespace hibana
