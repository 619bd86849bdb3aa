// The NCCL communicator on every rank of an MPI job, one GPU per rank (`mpirun -np 2
// tp_gpu_tests`, ctest's tp_ranks_nccl). Every test skips, on every rank alike, when the build
// has no NCCL or this host shows fewer GPUs than the job has ranks; the job then exits 77.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "core/device_memory.h"
#include "core/tensor.h"
#include "parallel/communicator.h"
#include "parallel/mpi_world.h"

namespace hibana {
namespace {

// A value no other (rank, i) gives, with bits that make the order of additions matter.
float value(int rank, int64_t i) {
  return 1.0f / static_cast<float>(3 + 7 * rank + 11 * i) + 1e3f * rank;
}

class NcclRanks : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!nccl_available() || visible_gpus() < test::world()->size()) return;
    // The communicator selects the rank's GPU; the backend (its stream, its memory) uses it.
    comm_ = make_nccl_communicator(test::world(), &cuda_stream_handle);
    backend_ = make_cuda_backend(comm_->device_index());
  }
  static void TearDownTestSuite() {
    backend_.reset();
    comm_.reset();
  }
  void SetUp() override {
    if (!nccl_available()) GTEST_SKIP() << "built without NCCL";
    if (visible_gpus() < test::world()->size()) {
      GTEST_SKIP() << test::world()->size() << " ranks need as many GPUs; this host shows "
                   << visible_gpus();
    }
    ASSERT_TRUE(comm_ && backend_);
  }

  static std::vector<float> to_host(const OwnedTensor& t) {
    std::vector<float> v(static_cast<size_t>(t.tensor.numel()));
    copy_to_host(t.tensor, v.data());  // waits for the stream's work
    return v;
  }
  static OwnedTensor on_gpu(const std::vector<float>& v) {
    OwnedTensor t = make_uninit_tensor(DType::f32, {static_cast<int64_t>(v.size())}, Device::cuda);
    copy_from_host(v.data(), t.tensor);
    return t;
  }
  // True when every rank holds the same bytes as rank 0 (compared over MPI).
  static bool same_bits_on_every_rank(const std::vector<float>& mine) {
    std::vector<float> root = mine;
    test::world()->broadcast(root.data(), root.size() * sizeof(float), 0);
    float differs = std::memcmp(root.data(), mine.data(), mine.size() * sizeof(float)) ? 1.0f : 0;
    test::world()->all_reduce_sum(&differs, 1);
    return differs == 0.0f;
  }

  static inline std::shared_ptr<Communicator> comm_;
  static inline std::shared_ptr<Backend> backend_;
};

TEST_F(NcclRanks, KnowsItsGpu) {
  EXPECT_EQ(comm_->device(), Device::cuda);
  EXPECT_EQ(comm_->rank(), test::world()->rank());
  EXPECT_EQ(comm_->size(), test::world()->size());
  EXPECT_EQ(comm_->device_index(), local_rank(comm_->rank()));
  EXPECT_EQ(backend_->device(), Device::cuda);
}

TEST_F(NcclRanks, AllReduceGivesEveryRankTheSameBits) {
  const int64_t n = 100003;  // not a multiple of NCCL's chunks
  std::vector<float> mine(n);
  for (int64_t i = 0; i < n; ++i) mine[i] = value(comm_->rank(), i);
  OwnedTensor t = on_gpu(mine);
  comm_->all_reduce_sum(t.tensor.ptr<float>(), n);
  const std::vector<float> got = to_host(t);
  for (int64_t i = 0; i < n; ++i) {
    float rank_order = value(0, i);
    for (int r = 1; r < comm_->size(); ++r) rank_order += value(r, i);
    // NCCL's order of additions is its own: close to the rank-ordered sum, not always equal.
    ASSERT_NEAR(got[i], rank_order, 1e-6f * std::abs(rank_order) + 1e-7f) << "element " << i;
  }
  EXPECT_TRUE(same_bits_on_every_rank(got));
  // And the same bits again on a second run.
  OwnedTensor again = on_gpu(mine);
  comm_->all_reduce_sum(again.tensor.ptr<float>(), n);
  EXPECT_EQ(to_host(again), got);
}

TEST_F(NcclRanks, AllGatherTakesBlocksOfEqualAndDifferentSizes) {
  for (bool equal : {true, false}) {
    SCOPED_TRACE(equal ? "equal blocks" : "different blocks");
    std::vector<int64_t> counts;
    int64_t total = 0;
    for (int r = 0; r < comm_->size(); ++r) {
      counts.push_back(equal ? 1000 : 3 + 2 * r + (r == 1 ? 5000 : 0));
      total += counts.back();
    }
    std::vector<float> mine(counts[comm_->rank()]);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = value(comm_->rank(), int64_t(i));
    OwnedTensor send = on_gpu(mine);
    OwnedTensor recv = on_gpu(std::vector<float>(total, -1.0f));
    comm_->all_gather(send.tensor.ptr<float>(), recv.tensor.ptr<float>(), counts);
    const std::vector<float> all = to_host(recv);
    int64_t at = 0;
    for (int r = 0; r < comm_->size(); ++r) {
      for (int64_t i = 0; i < counts[r]; ++i, ++at) {
        ASSERT_EQ(all[at], value(r, i)) << r << "," << i;
      }
    }
  }
}

TEST_F(NcclRanks, BroadcastCopiesTheRootsBytes) {
  for (int root = 0; root < comm_->size(); ++root) {
    std::vector<float> mine = {float(comm_->rank()), 10.0f * comm_->rank(), -1.0f};
    OwnedTensor t = on_gpu(mine);
    comm_->broadcast(t.tensor.data, 3 * sizeof(float), root);
    EXPECT_EQ(to_host(t), (std::vector<float>{float(root), 10.0f * root, -1.0f}));
  }
  comm_->barrier();
}

// Host buffers (rank 0's step messages, the gathered logits) go through MPI, rank-ordered.
TEST_F(NcclRanks, HostBuffersGoThroughMpi) {
  std::vector<float> data(257);
  for (size_t i = 0; i < data.size(); ++i) data[i] = value(comm_->rank(), int64_t(i));
  comm_->all_reduce_sum(data.data(), int64_t(data.size()));
  for (size_t i = 0; i < data.size(); ++i) {
    float want = value(0, int64_t(i));
    for (int r = 1; r < comm_->size(); ++r) want += value(r, int64_t(i));
    ASSERT_EQ(data[i], want) << i;
  }
  int64_t v[2] = {comm_->rank(), 7};
  comm_->broadcast(v, sizeof v, comm_->size() - 1);
  EXPECT_EQ(v[0], comm_->size() - 1);
}

// Collectives queued on the backend's stream are recorded in a CUDA graph and replayed.
TEST_F(NcclRanks, AllReduceIsCapturedInAGraph) {
  if (!backend_->can_capture()) GTEST_SKIP() << "graphs are off (HIBANA_CUDA_GRAPHS=0)";
  OwnedTensor t = on_gpu(std::vector<float>(64, 1.0f));
  backend_->synchronize();
  backend_->begin_capture();
  comm_->all_reduce_sum(t.tensor.ptr<float>(), 64);
  std::shared_ptr<void> graph = backend_->end_capture();
  ASSERT_TRUE(graph) << "capture failed";
  backend_->replay(graph);
  backend_->replay(graph);
  const float n = float(comm_->size());
  EXPECT_EQ(to_host(t), std::vector<float>(64, n * n));
}

}  // namespace
}  // namespace hibana
