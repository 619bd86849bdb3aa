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
// Across hosts (`--nnodes N`, nodes.nnodes > 1): `bootstrap` is this node's MPI job (or the
// single communicator when the node runs one rank), so it cannot carry anything between nodes.
// This rank is node_rank * (ranks per node) + its rank in the node; the ranks of each node agree
// over `bootstrap` that they have their GPUs, node 0's first rank makes the unique id and hands
// it to the other nodes' first ranks through the rendezvous (rendezvous.h), which pass it on to
// their node's ranks over `bootstrap`. Host buffers then go through NCCL as well, copied into a
// device buffer of this communicator's and back on the stream, and the call waits for the
// stream, so it still returns with the data in place; barrier is a one-float all-reduce. The
// first rank of each node keeps its rendezvous connections in a NodeWatch (node_watch.h): a node
// ending without a goodbye ends this one; the destructor says goodbye.
//
// Determinism: all_reduce_sum is ncclAllReduce (ncclFloat, ncclSum). NCCL's ring (or tree)
// reduction gives every rank the same bits, and the same bits on every run for a fixed topology
// and NCCL version, but it does not add in rank order as the CPU communicators do: results may
// differ from an MPI run, or between NCCL versions, algorithms (NCCL_ALGO) or GPU topologies,
// in the last bits. Rank-identical bits are what keeps MoE routing and sampling in step; rank
// order is not needed for that.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/communicator.h"
#include "parallel/node_watch.h"

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
  NcclCommunicator(std::shared_ptr<Communicator> bootstrap, StreamSource stream,
                   const NodeGroup& nodes)
      : boot_(std::move(bootstrap)),
        stream_(stream),
        rank_(nodes.node_rank * boot_->size() + boot_->rank()),
        size_(nodes.nnodes * boot_->size()),
        cross_node_(nodes.nnodes > 1) {
    default_nccl_environment();
    device_ = local_rank(boot_->rank());
    if (cross_node_) {
      join_nodes(nodes);
      return;
    }
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
    if (watch_) watch_->say_goodbye();  // this node ends cleanly: the others need not
    watch_.reset();
    if (comm_) {
      cudaStreamSynchronize(stream());  // nothing queued may still use the communicator
      ncclCommDestroy(comm_);
    }
    if (staging_) cudaFree(staging_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::cuda; }
  int device_index() const override { return device_; }

  // One rank still goes through NCCL (a copy in place), so a one-GPU machine runs every path.
  void all_reduce_sum(float* data, int64_t count) override {
    if (count == 0) return;
    if (!on_device(data)) {
      if (!cross_node_) return boot_->all_reduce_sum(data, count);
      return host_all_reduce_sum(data, count);
    }
    check_nccl(
        ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat, ncclSum, comm_, stream()),
        "ncclAllReduce", comm_);
  }

  // Device buffers: gather_on_device. Host buffers: the bootstrap, or NCCL across hosts.
  void all_gather(const float* send, float* recv, std::span<const int64_t> counts) override {
    check(static_cast<int>(counts.size()) == size_, ErrorKind::internal,
          "all_gather: one count per rank");
    const bool device = on_device(recv);
    check(counts[rank_] == 0 || on_device(send) == device, ErrorKind::internal,
          "all_gather: send and recv must both be in host memory or both on the GPU");
    if (!device) {
      if (!cross_node_) return boot_->all_gather(send, recv, counts);
      return host_all_gather(send, recv, counts);
    }
    gather_on_device(send, recv, counts);
  }

  void broadcast(void* data, size_t bytes, int root) override {
    if (bytes == 0) return;
    if (!on_device(data)) {
      if (!cross_node_) return boot_->broadcast(data, bytes, root);
      return host_broadcast(data, bytes, root);
    }
    check_nccl(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream()), "ncclBroadcast",
               comm_);
  }

  // Every rank's queued device work is done and every rank has arrived.
  void barrier() override {
    check_cuda(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
    if (!cross_node_) return boot_->barrier();
    float one = 1.0f;
    host_all_reduce_sum(&one, 1);
  }

 protected:
  void abort_all(int code) override {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    boot_->abort(code);
  }

 private:
  cudaStream_t stream() const { return stream_ ? static_cast<cudaStream_t>(stream_()) : nullptr; }

  // Equal blocks: one ncclAllGather. Blocks of different sizes: one broadcast per rank, from
  // its send block into its place in recv, grouped so NCCL runs them together. In place (send
  // is recv's block of this rank) works too.
  void gather_on_device(const float* send, float* recv, std::span<const int64_t> counts) {
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

  // This communicator's device buffer for host data (across hosts), at least `bytes` long.
  // Every call that uses it waits for the stream before returning, so it is free again here.
  void* staging(size_t bytes) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");  // the caller's thread may not have
    if (bytes > staging_bytes_) {
      const size_t want = std::max({bytes, 2 * staging_bytes_, size_t{1} << 20});
      if (staging_) check_cuda(cudaFree(staging_), "cudaFree");
      staging_ = nullptr;
      staging_bytes_ = 0;
      check_cuda(cudaMalloc(&staging_, want), "cudaMalloc (staging for host buffers)");
      staging_bytes_ = want;
    }
    return staging_;
  }

  void copy_and_wait(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    check_cuda(cudaMemcpyAsync(dst, src, bytes, kind, stream()), "cudaMemcpyAsync");
    check_cuda(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
  }

  void host_all_reduce_sum(float* data, int64_t count) {
    const size_t bytes = static_cast<size_t>(count) * sizeof(float);
    float* dev = static_cast<float*>(staging(bytes));
    check_cuda(cudaMemcpyAsync(dev, data, bytes, cudaMemcpyHostToDevice, stream()),
               "cudaMemcpyAsync");
    check_nccl(
        ncclAllReduce(dev, dev, static_cast<size_t>(count), ncclFloat, ncclSum, comm_, stream()),
        "ncclAllReduce", comm_);
    copy_and_wait(data, dev, bytes, cudaMemcpyDeviceToHost);
  }

  void host_all_gather(const float* send, float* recv, std::span<const int64_t> counts) {
    int64_t total = 0, at = 0;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) at = total;
      total += counts[r];
    }
    if (total == 0) return;
    float* dev = static_cast<float*>(staging(static_cast<size_t>(total) * sizeof(float)));
    const size_t mine = static_cast<size_t>(counts[rank_]) * sizeof(float);
    if (mine) {
      check_cuda(cudaMemcpyAsync(dev + at, send, mine, cudaMemcpyHostToDevice, stream()),
                 "cudaMemcpyAsync");
    }
    gather_on_device(dev + at, dev, counts);  // in place: this rank's block is already there
    copy_and_wait(recv, dev, static_cast<size_t>(total) * sizeof(float), cudaMemcpyDeviceToHost);
  }

  void host_broadcast(void* data, size_t bytes, int root) {
    void* dev = staging(bytes);
    if (rank_ == root) {
      check_cuda(cudaMemcpyAsync(dev, data, bytes, cudaMemcpyHostToDevice, stream()),
                 "cudaMemcpyAsync");
    }
    check_nccl(ncclBroadcast(dev, dev, bytes, ncclUint8, root, comm_, stream()), "ncclBroadcast",
               comm_);
    if (rank_ == root) {
      check_cuda(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
    } else {
      copy_and_wait(data, dev, bytes, cudaMemcpyDeviceToHost);
    }
  }

  // What this node's first rank does when another node ends without a goodbye: it ends, and
  // its mpirun ends the node's other ranks (it sees a rank exit with an error).
  NodeWatch::Lost lost_node() const {
    return [rank = rank_](const std::string& why) {
      std::fprintf(stderr, "error (rank %d): %s\n", rank, why.c_str());
      std::fflush(stderr);
      std::_Exit(1);
    };
  }

  // Across hosts: this node's ranks agree that each has its GPU (as agree()), but before any
  // throws, the node's first rank tells node 0 (whose own trouble ends it before the
  // rendezvous: the other nodes then time out); node 0's first rank makes the unique id and
  // serves it to the other nodes, whose first ranks pass it on over `bootstrap`.
  void join_nodes(const NodeGroup& nodes) {
    check(boot_->size() * nodes.nnodes == nodes.ranks, ErrorKind::invalid_argument,
          "node " + std::to_string(nodes.node_rank) + " runs " + std::to_string(boot_->size()) +
              " ranks, but --tp " + std::to_string(nodes.ranks) + " over --nnodes " +
              std::to_string(nodes.nnodes) + " needs " +
              std::to_string(nodes.ranks / std::max(1, nodes.nnodes)));
    const std::string mine = select_gpu();
    float failed = mine.empty() ? 0.0f : 1.0f;
    boot_->all_reduce_sum(&failed, 1);
    std::string not_ready = mine;
    if (not_ready.empty() && failed != 0.0f) {
      not_ready = "another rank of node " + std::to_string(nodes.node_rank) +
                  " could not select its GPU (its error says why)";
    }
    struct {
      int ok;
      int kind;
      ncclUniqueId id;
      char why[1024];
    } hello{};
    if (boot_->rank() == 0) {
      try {
        if (nodes.node_rank == 0) {
          check(not_ready.empty(), ErrorKind::unsupported, not_ready);
          RendezvousMaster master(nodes);
          check_nccl(ncclGetUniqueId(&hello.id), "ncclGetUniqueId", nullptr);
          master.serve(std::string(reinterpret_cast<const char*>(&hello.id), sizeof hello.id));
          std::vector<std::string> names;
          for (int r = 1; r < nodes.nnodes; ++r) names.push_back("node " + std::to_string(r));
          watch_ = std::make_unique<NodeWatch>(master.take_connections(), names, lost_node());
        } else {
          int connection = -1;
          const std::string id = rendezvous_join(nodes, not_ready, &connection);
          watch_ = std::make_unique<NodeWatch>(std::vector<int>{connection},
                                               std::vector<std::string>{"node 0"}, lost_node());
          check(id.size() == sizeof hello.id, ErrorKind::internal,
                "node 0 sent an NCCL unique id of " + std::to_string(id.size()) + " bytes, not " +
                    std::to_string(sizeof hello.id));
          std::memcpy(&hello.id, id.data(), sizeof hello.id);
        }
        hello.ok = 1;
      } catch (const Error& e) {
        hello.kind = static_cast<int>(e.kind());
        std::snprintf(hello.why, sizeof hello.why, "%s", e.what());
      } catch (const std::exception& e) {
        hello.kind = static_cast<int>(ErrorKind::internal);
        std::snprintf(hello.why, sizeof hello.why, "%s", e.what());
      }
    }
    boot_->broadcast(&hello, sizeof hello, 0);
    if (!mine.empty()) throw Error(ErrorKind::unsupported, mine);
    if (!hello.ok) throw Error(static_cast<ErrorKind>(hello.kind), hello.why);
    check_nccl(ncclCommInitRank(&comm_, size_, hello.id, rank_), "ncclCommInitRank", nullptr);
  }

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
  bool cross_node_ = false;
  ncclComm_t comm_ = nullptr;
  void* staging_ = nullptr;  // across hosts: host buffers' trip through NCCL
  size_t staging_bytes_ = 0;
  std::unique_ptr<NodeWatch> watch_;  // across hosts, on each node's first rank
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
                                                     StreamSource stream, const NodeGroup& nodes) {
  check(bootstrap != nullptr, ErrorKind::internal, "make_nccl_communicator: no bootstrap");
  return std::make_unique<NcclCommunicator>(std::move(bootstrap), stream, nodes);
}

}  // namespace hibana
