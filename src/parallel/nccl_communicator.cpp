// The NCCL communicator: one process per GPU (the ranks of the MPI job `hibana run --tp N`
// starts), buffers in GPU memory, collectives queued on the CUDA backend's stream.
//
// Start: every rank selects GPU local_rank() (an index within CUDA_VISIBLE_DEVICES) and the
// ranks agree, over MPI, that each has one before anyone waits in NCCL; rank 0 creates NCCL's
// unique id and broadcasts it over MPI; every rank then joins with ncclCommInitRank.
// NCCL_NVLS_ENABLE defaults to 0 (NVLink multicast off); NCCL's other variables are left alone.
//
// Which path a collective takes is decided by where its buffer lives: device memory goes
// through NCCL on the stream (the call returns once the work is queued, like a backend op), host
// memory through the MPI communicator the ranks started with (the call returns with the data in
// place, as on the CPU): rank 0's step messages and the other small host-side exchanges keep
// working unchanged. Every rank must pass buffers of the same kind to the same collective.
//
// Determinism: all_reduce_sum is ncclAllReduce (ncclFloat, ncclSum). NCCL's ring (or tree)
// reduction gives every rank the same bits, and the same bits on every run for a fixed topology
// and NCCL version, but it does not add in rank order as the CPU communicators do: results may
// differ from an MPI run, or between NCCL versions, algorithms (NCCL_ALGO) or GPU topologies,
// in the last bits. Rank-identical bits are what keeps MoE routing and sampling in step; rank
// order is not needed for that.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "parallel/communicator.h"

namespace hibana {

namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  throw Error(ErrorKind::internal, std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

void check_nccl(ncclResult_t r, const char* what, ncclComm_t comm) {
  if (r == ncclSuccess) return;
  std::string msg = std::string("NCCL: ") + what + ": " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last && *last) msg += std::string(" (") + last + ")";
  throw Error(r == ncclSystemError ? ErrorKind::io : ErrorKind::internal, msg);
}

bool on_device(const void* p) {
  if (!p) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

std::string visible_devices_note() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v ? std::string(" (CUDA_VISIBLE_DEVICES=") + v + ")" : std::string();
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<Communicator> bootstrap, StreamSource stream)
      : boot_(std::move(bootstrap)), stream_(stream), rank_(boot_->rank()), size_(boot_->size()) {
    default_nccl_environment();
    device_ = local_rank(rank_);
    agree(select_gpu());
    struct {
      int ok;
      ncclUniqueId id;
    } hello{};
    ncclResult_t made = ncclSuccess;
    if (rank_ == 0) {
      made = ncclGetUniqueId(&hello.id);
      hello.ok = made == ncclSuccess;
    }
    boot_->broadcast(&hello, sizeof hello, 0);
    if (rank_ == 0) check_nccl(made, "ncclGetUniqueId", nullptr);
    check(hello.ok != 0, ErrorKind::internal, "rank 0 could not create NCCL's unique id");
    check_nccl(ncclCommInitRank(&comm_, size_, hello.id, rank_), "ncclCommInitRank", nullptr);
  }
  ~NcclCommunicator() override {
    if (!comm_) return;
    cudaStreamSynchronize(stream());  // nothing queued may still use the communicator
    ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::cuda; }
  int device_index() const override { return device_; }

  // One rank still goes through NCCL (a copy in place), so a one-GPU machine runs every path.
  void all_reduce_sum(float* data, int64_t count) override {
    if (count == 0) return;
    if (!on_device(data)) return boot_->all_reduce_sum(data, count);
    check_nccl(
        ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat, ncclSum, comm_, stream()),
        "ncclAllReduce", comm_);
  }

  // Equal blocks: one ncclAllGather. Blocks of different sizes: one broadcast per rank, from
  // its send block into its place in recv, grouped so NCCL runs them together.
  void all_gather(const float* send, float* recv, std::span<const int64_t> counts) override {
    check(static_cast<int>(counts.size()) == size_, ErrorKind::internal,
          "all_gather: one count per rank");
    const bool device = on_device(recv);
    check(counts[rank_] == 0 || on_device(send) == device, ErrorKind::internal,
          "all_gather: send and recv must both be in host memory or both on the GPU");
    if (!device) return boot_->all_gather(send, recv, counts);
    bool equal = true;
    for (int r = 1; r < size_; ++r) equal = equal && counts[r] == counts[0];
    if (equal) {
      if (counts[0] == 0) return;
      check_nccl(
          ncclAllGather(send, recv, static_cast<size_t>(counts[0]), ncclFloat, comm_, stream()),
          "ncclAllGather", comm_);
      return;
    }
    check_nccl(ncclGroupStart(), "ncclGroupStart", comm_);
    ncclResult_t res = ncclSuccess;
    int64_t at = 0;
    for (int r = 0; r < size_ && res == ncclSuccess; at += counts[r], ++r) {
      if (counts[r] == 0) continue;
      float* dst = recv + at;
      res = ncclBroadcast(r == rank_ ? send : dst, dst, static_cast<size_t>(counts[r]), ncclFloat,
                          r, comm_, stream());
    }
    const ncclResult_t end = ncclGroupEnd();
    check_nccl(res, "ncclBroadcast", comm_);
    check_nccl(end, "ncclGroupEnd", comm_);
  }

  void broadcast(void* data, size_t bytes, int root) override {
    if (bytes == 0) return;
    if (!on_device(data)) return boot_->broadcast(data, bytes, root);
    check_nccl(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream()), "ncclBroadcast",
               comm_);
  }

  // Every rank's queued device work is done and every rank has arrived.
  void barrier() override {
    check_cuda(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
    boot_->barrier();
  }

 protected:
  void abort_all(int code) override {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    boot_->abort(code);
  }

 private:
  cudaStream_t stream() const { return stream_ ? static_cast<cudaStream_t>(stream_()) : nullptr; }

  // This rank's GPU, or why it has none ("" when selected).
  std::string select_gpu() {
    const std::string who =
        "rank " + std::to_string(rank_) + " (local rank " + std::to_string(device_) + ")";
    int gpus = 0;
    cudaError_t e = cudaGetDeviceCount(&gpus);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return who + " sees no CUDA device: " + cudaGetErrorString(e);
    }
    if (device_ >= gpus) {
      return who + " needs GPU " + std::to_string(device_) + " but this process sees " +
             std::to_string(gpus) + visible_devices_note() + "; one GPU per rank";
    }
    if ((e = cudaSetDevice(device_)) != cudaSuccess) {
      cudaGetLastError();
      return who + " cannot use GPU " + std::to_string(device_) + ": " + cudaGetErrorString(e);
    }
    return {};
  }

  // Every rank learns whether all of them got this far, so none waits in NCCL for one that
  // failed: the failing ranks say why, the others that another rank failed.
  void agree(const std::string& error) {
    float failed = error.empty() ? 0.0f : 1.0f;
    boot_->all_reduce_sum(&failed, 1);
    if (!error.empty()) throw Error(ErrorKind::unsupported, error);
    check(failed == 0.0f, ErrorKind::unsupported,
          "another rank could not select its GPU (its error says why)");
  }

  std::shared_ptr<Communicator> boot_;
  StreamSource stream_;
  int rank_ = 0, size_ = 1, device_ = 0;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

bool nccl_available() {
  return true;
}

int visible_gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::unique_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Communicator> bootstrap,
                                                     StreamSource stream) {
  check(bootstrap != nullptr, ErrorKind::internal, "make_nccl_communicator: no bootstrap");
  return std::make_unique<NcclCommunicator>(std::move(bootstrap), stream);
}

}  // namespace hibana
