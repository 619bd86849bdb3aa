// The MPI communicator's collectives, on every rank of the job.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <thread>
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

double cpu_seconds() {  // of this process, every thread (MPI's own included)
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// A follower waiting for rank 0's next step (broadcast_idle) while rank 0 is idle for a second
// must not keep a core busy, as MPI_Bcast's polling does (a whole second of CPU when the core
// is free). Measured on rank 1, checked on rank 0.
TEST(MpiCommunicator, AnIdleBroadcastWaitsWithoutKeepingACoreBusy) {
  auto comm = test::world();
  comm->barrier();
  int64_t value = comm->rank() == 0 ? 42 : -1;
  double used[2] = {0.0, 0.0};  // rank 1's CPU seconds and wall seconds in the wait
  if (comm->rank() == 0) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    comm->broadcast_idle(&value, sizeof value, 0);
  } else {
    const double cpu = cpu_seconds();
    const auto wall = std::chrono::steady_clock::now();
    comm->broadcast_idle(&value, sizeof value, 0);
    used[0] = cpu_seconds() - cpu;
    used[1] = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
  }
  EXPECT_EQ(value, 42);
  comm->broadcast(used, sizeof used, 1);
  EXPECT_GT(used[1], 0.3);  // it did wait for rank 0
  EXPECT_LT(used[0], 0.2) << "CPU seconds of rank 1 in " << used[1] << " s of waiting";
  if (comm->rank() == 0) std::printf("idle wait: %.3f s of CPU in %.3f s\n", used[0], used[1]);
  // Steps that follow each other closely: a burst of small broadcasts still arrives in order.
  for (int64_t i = 0; i < 200; ++i) {
    int64_t v = comm->rank() == 0 ? i : -1;
    comm->broadcast_idle(&v, sizeof v, 0);
    ASSERT_EQ(v, i);
  }
}

}  // namespace
}  // namespace hibana
