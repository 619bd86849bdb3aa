// main() of the tests that run as MPI ranks: one communicator for the whole run, the cores
// shared between the ranks, and a failure on any rank fails the job (exit 77 when every test
// skipped).
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "core/log.h"
#include "core/thread_pool.h"
#include "parallel/mpi_world.h"

namespace hibana::test {
namespace {
std::shared_ptr<Communicator>& slot() {
  static std::shared_ptr<Communicator> comm;
  return comm;
}
}  // namespace

std::shared_ptr<Communicator> world() {
  return slot();
}

}  // namespace hibana::test

int main(int argc, char** argv) {
  using namespace hibana;
  testing::InitGoogleTest(&argc, argv);
  set_log_level(LogLevel::warn);
  test::slot() = make_mpi_communicator();
  Communicator& comm = *test::world();
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  set_default_thread_count(std::max(1, cores / comm.size()));
  if (comm.rank() != 0) {  // one report: the other ranks' failures still fail the job
    delete testing::UnitTest::GetInstance()->listeners().Release(
        testing::UnitTest::GetInstance()->listeners().default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  float failed = rc != 0 ? 1.0f : 0.0f;
  comm.all_reduce_sum(&failed, 1);
  if (comm.rank() == 0 && failed > 0 && rc == 0)
    std::fprintf(stderr, "a test failed on another rank\n");
  test::slot().reset();
  if (failed > 0) return 1;
  // Every test skipped (the same on every rank: e.g. no GPUs for the NCCL tests): 77, which
  // ctest reports as skipped.
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  const bool all_skipped =
      unit.test_to_run_count() > 0 && unit.skipped_test_count() == unit.test_to_run_count();
  return all_skipped ? 77 : 0;
}
