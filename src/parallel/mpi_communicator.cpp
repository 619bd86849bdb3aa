// The MPI communicator: ranks are processes (of one host, for now), buffers live in host memory.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "parallel/communicator.h"

namespace hibana {

namespace {

int as_count(int64_t n) {
  check(n >= 0 && n <= INT_MAX, ErrorKind::unsupported,
        "an MPI message of " + std::to_string(n) + " values (the limit is 2^31 - 1)");
  return static_cast<int>(n);
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int initialised = 0, finalised = 0;
    MPI_Initialized(&initialised);
    MPI_Finalized(&finalised);
    check(!finalised, ErrorKind::internal, "MPI was already finalised in this process");
    if (!initialised) {
      // Serialized: `hibana serve` loads the model on one thread and runs passes on the engine's
      // (never two at once), so MPI must not assume the thread that initialised it.
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      check(provided >= MPI_THREAD_SERIALIZED, ErrorKind::unsupported,
            "this MPI library does not allow calls from more than one thread");
      owns_mpi_ = true;
    }
    // A communicator of our own, so our collectives never meet anyone else's.
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    MPI_Comm_free(&comm_);
    if (owns_mpi_) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::cpu; }

  // MPI_Allreduce may add in an order of its own choosing (and a different one per rank), so
  // the ranks' values are gathered and added here in rank order: the same bits on every rank.
  void all_reduce_sum(float* data, int64_t count) override {
    if (size_ == 1 || count == 0) return;
    scratch_.resize(static_cast<size_t>(count) * size_);
    MPI_Allgather(data, as_count(count), MPI_FLOAT, scratch_.data(), as_count(count), MPI_FLOAT,
                  comm_);
    for (int64_t i = 0; i < count; ++i) {
      float s = scratch_[i];
      for (int r = 1; r < size_; ++r) s += scratch_[static_cast<size_t>(r) * count + i];
      data[i] = s;
    }
  }

  void all_gather(const float* send, float* recv, std::span<const int64_t> counts) override {
    check(static_cast<int>(counts.size()) == size_, ErrorKind::internal,
          "all_gather: one count per rank");
    std::vector<int> n(size_), at(size_);
    int64_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      n[r] = as_count(counts[r]);
      at[r] = as_count(offset);
      offset += counts[r];
    }
    MPI_Allgatherv(send, n[rank_], MPI_FLOAT, recv, n.data(), at.data(), MPI_FLOAT, comm_);
  }

  void broadcast(void* data, size_t bytes, int root) override {
    MPI_Bcast(data, as_count(static_cast<int64_t>(bytes)), MPI_BYTE, root, comm_);
  }

  // MPI_Bcast spins (Open MPI polls until the message comes), so an idle follower would keep a
  // core busy. Here the root sends as usual; the others test the non-blocking broadcast in a
  // tight loop for kSpin (steps that follow each other closely wait no longer than with
  // MPI_Bcast), then sleep between tests, from kFirstSleep doubling up to kLongestSleep.
  void broadcast_idle(void* data, size_t bytes, int root) override {
    MPI_Request request;
    MPI_Ibcast(data, as_count(static_cast<int64_t>(bytes)), MPI_BYTE, root, comm_, &request);
    if (rank_ == root) {
      MPI_Wait(&request, MPI_STATUS_IGNORE);
      return;
    }
    using Clock = std::chrono::steady_clock;
    constexpr auto kSpin = std::chrono::microseconds(2000);
    constexpr auto kFirstSleep = std::chrono::microseconds(20);
    constexpr auto kLongestSleep = std::chrono::microseconds(1000);
    const Clock::time_point start = Clock::now();
    auto sleep = kFirstSleep;
    for (int done = 0;;) {
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) return;
      if (Clock::now() - start < kSpin) continue;
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, kLongestSleep);
    }
  }

  void barrier() override { MPI_Barrier(comm_); }

 protected:
  void abort_all(int code) override { MPI_Abort(comm_, code); }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  bool owns_mpi_ = false;
  std::vector<float> scratch_;
};

}  // namespace

bool mpi_available() {
  return true;
}

std::unique_ptr<Communicator> make_mpi_communicator() {
  return std::make_unique<MpiCommunicator>();
}

}  // namespace hibana
