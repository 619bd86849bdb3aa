// Choosing a communicator for `--tp`, and the NCCL communicator's setup that needs no GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "core/error.h"
#include "parallel/communicator.h"
#include "support/scoped_env.h"

namespace hibana {
namespace {

using testing::HasSubstr;

using test::ScopedEnv;

TEST(CommunicatorKind, TheCpuUsesMpiAndCudaUsesNccl) {
  EXPECT_EQ(communicator_kind(Device::cpu, 1), CommunicatorKind::single);
  EXPECT_EQ(communicator_kind(Device::cuda, 1), CommunicatorKind::single);
  EXPECT_EQ(communicator_kind(Device::cpu, 2), CommunicatorKind::mpi);
  EXPECT_EQ(communicator_kind(Device::cuda, 2), CommunicatorKind::nccl);
  EXPECT_EQ(communicator_kind(Device::cuda, 8), CommunicatorKind::nccl);
}

TEST(TpUnavailableReason, EmptyWhenTheBuildAndMachineCanRunIt) {
  EXPECT_EQ(tp_unavailable_reason(Device::cpu, 1, false, false, 0), "");
  EXPECT_EQ(tp_unavailable_reason(Device::cpu, 4, true, false, 0), "");
  EXPECT_EQ(tp_unavailable_reason(Device::cuda, 2, true, true, 2), "");
  EXPECT_EQ(tp_unavailable_reason(Device::cuda, 2, true, true, 8), "");
}

TEST(TpUnavailableReason, NamesWhatIsMissing) {
  EXPECT_THAT(tp_unavailable_reason(Device::cpu, 2, false, false, 0), HasSubstr("without MPI"));
  const std::string no_nccl = tp_unavailable_reason(Device::cuda, 2, true, false, 2);
  EXPECT_THAT(no_nccl, HasSubstr("--tp 2 --device cuda needs the NCCL communicator"));
  EXPECT_THAT(no_nccl, HasSubstr("NCCL was not found"));
  EXPECT_THAT(no_nccl, HasSubstr("--device cpu"));
  EXPECT_THAT(tp_unavailable_reason(Device::cuda, 2, false, false, 2),
              HasSubstr("MPI was not found"));
  const std::string few = tp_unavailable_reason(Device::cuda, 4, true, true, 2);
  EXPECT_THAT(few, HasSubstr("needs 4 GPUs; this process sees 2"));
  EXPECT_THAT(few, HasSubstr("CUDA_VISIBLE_DEVICES"));
}

TEST(TpUnavailableReason, ThisBuildOnThisMachine) {
  EXPECT_EQ(tp_unavailable_reason(Device::cpu, 2).empty(), mpi_available());
  const std::string cuda = tp_unavailable_reason(Device::cuda, 2);
  if (!nccl_available()) {
    EXPECT_THAT(cuda, HasSubstr("needs the NCCL communicator"));
    EXPECT_EQ(visible_gpus(), 0);
  } else if (visible_gpus() < 2) {
    EXPECT_THAT(cuda, HasSubstr("needs 2 GPUs"));
  } else {
    EXPECT_EQ(cuda, "");
  }
}

TEST(NcclEnvironment, MulticastIsOffByDefault) {
  ScopedEnv env("NCCL_NVLS_ENABLE", nullptr);
  default_nccl_environment();
  ASSERT_NE(std::getenv("NCCL_NVLS_ENABLE"), nullptr);
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");
}

TEST(NcclEnvironment, TheUsersSettingsStay) {
  ScopedEnv nvls("NCCL_NVLS_ENABLE", "1");
  ScopedEnv algo("NCCL_ALGO", "Ring");
  default_nccl_environment();
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "1");
  EXPECT_STREQ(std::getenv("NCCL_ALGO"), "Ring");
}

TEST(LocalRank, ComesFromTheLauncher) {
  ScopedEnv ompi("OMPI_COMM_WORLD_LOCAL_RANK", nullptr);
  ScopedEnv mpich("MPI_LOCALRANKID", nullptr);
  EXPECT_EQ(local_rank(3), 3);  // no launcher variable: one host, the rank itself
  {
    ScopedEnv m("MPI_LOCALRANKID", "2");
    EXPECT_EQ(local_rank(5), 2);
  }
  ScopedEnv o("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  EXPECT_EQ(local_rank(5), 1);
  ScopedEnv bad("OMPI_COMM_WORLD_LOCAL_RANK", "x1");
  EXPECT_THROW(local_rank(0), Error);
}

TEST(NcclCommunicator, RefusedWithoutNccl) {
  if (nccl_available()) GTEST_SKIP() << "this build has NCCL (tests/parallel/gpu runs it)";
  try {
    make_nccl_communicator(make_single_communicator(), nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_THAT(e.what(), HasSubstr("without the NCCL communicator"));
  }
}

TEST(NcclCommunicator, WithoutAGpuSaysSo) {
  if (!nccl_available()) GTEST_SKIP() << "built without NCCL";
  if (visible_gpus() > 0) GTEST_SKIP() << "this machine has a GPU (tests/parallel/gpu runs it)";
  ScopedEnv ompi("OMPI_COMM_WORLD_LOCAL_RANK", nullptr);
  ScopedEnv mpich("MPI_LOCALRANKID", nullptr);
  try {
    make_nccl_communicator(make_single_communicator(), nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_THAT(e.what(), HasSubstr("rank 0 (local rank 0)"));
  }
}

}  // namespace
}  // namespace hibana
