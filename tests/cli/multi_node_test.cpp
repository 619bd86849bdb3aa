// `run`/`serve --tp T --nnodes N --node-rank R --master ADDR:PORT` as a user types them: every
// mistake is refused before any rank starts or any socket opens, naming the flag. The
// rendezvous itself is tested in tests/parallel/rendezvous_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "parallel/communicator.h"
#include "support/run_command.h"

namespace hibana {
namespace {

using testing::HasSubstr;

const std::string kRun = "run --prompt-ids 1,2,3 -n 2 --print-ids ";
const std::string kMaster = " --master 127.0.0.1:29500";

void expect_refused(const std::string& args, const std::string& words) {
  SCOPED_TRACE(args);
  auto r = test::run_hibana(args);
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr(words));
  EXPECT_EQ(r.out, "");
}

TEST(MultiNodeFlags, TpMustSplitEvenlyOverTheNodes) {
  expect_refused(kRun + "--device cuda --tp 3 --nnodes 2 --node-rank 0" + kMaster,
                 "--tp 3 is the number of ranks over all nodes");
  expect_refused(kRun + "--device cuda --nnodes 2 --node-rank 0" + kMaster,  // --tp 1
                 "must be a multiple of --nnodes 2");
}

TEST(MultiNodeFlags, NodeRankMustBeOneOfTheNodes) {
  expect_refused(kRun + "--device cuda --tp 4 --nnodes 2 --node-rank 2" + kMaster,
                 "--node-rank 2 is out of range: --nnodes 2 numbers the nodes 0 to 1");
  expect_refused(kRun + "--node-rank 1", "give --nnodes N");
}

TEST(MultiNodeFlags, MasterMustBeAddrPort) {
  expect_refused(kRun + "--device cuda --tp 2 --nnodes 2 --node-rank 1 --master spark-1",
                 "--master 'spark-1' is not ADDR:PORT");
  expect_refused(kRun + "--device cuda --tp 2 --nnodes 2 --node-rank 1 --master h:99999",
                 "the port must be a number from 1 to 65535");
  expect_refused(kRun + "--device cuda --tp 2 --nnodes 2 --node-rank 1",
                 "needs --master ADDR:PORT");
}

TEST(MultiNodeFlags, TheCpuPathSaysHowToSpanHosts) {
  for (const std::string& args :
       {kRun + "--tp 2 --nnodes 2 --node-rank 0" + kMaster,
        "serve --port 0 --device cpu --tp 2 --nnodes 2 --node-rank 1" + kMaster}) {
    expect_refused(args, "mpirun -H host1,host2 -np 2 hibana run --tp 2");
  }
}

TEST(MultiNodeFlags, ServeChecksThemToo) {
  expect_refused("serve --port 0 --device cuda --tp 4 --nnodes 2 --node-rank 5" + kMaster,
                 "--node-rank 5 is out of range");
}

// Valid flags on a host without NCCL or GPUs: refused before any rank starts, saying which.
TEST(MultiNodeFlags, AHostThatCannotRunItsRanksSaysWhy) {
  if (nccl_available() && visible_gpus() >= 1) GTEST_SKIP() << "this host has a GPU and NCCL";
  auto r = test::run_hibana(kRun + "--device cuda --tp 2 --nnodes 2 --node-rank 1" + kMaster);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(nccl_available() ? "needs 1 GPU; this process sees 0"
                                                : "needs the NCCL communicator"));
  EXPECT_EQ(r.out, "");
}

}  // namespace
}  // namespace hibana
