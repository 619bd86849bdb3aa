// The collectives tensor parallelism needs, whatever carries them: one process per rank, each
// holding its shard of the model, exchanging activations through a Communicator.
//
// Implementations: single (one rank, nothing to exchange), MPI (ranks are processes of this
// host, buffers in host memory: the CPU backend), NCCL (one process per GPU, buffers in GPU
// memory, collectives queued on the CUDA backend's stream; see nccl_communicator.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/tensor.h"
#include "parallel/rendezvous.h"

namespace hibana {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Where the buffers given to the collectives live.
  virtual Device device() const = 0;
  // Which device of that kind this rank owns (the CUDA ordinal, counted within
  // CUDA_VISIBLE_DEVICES); 0 on the CPU.
  virtual int device_index() const { return 0; }

  // data[i] <- sum over ranks of data[i], in place, with the same bits on every rank and every
  // run. The CPU communicators add in rank order (((r0 + r1) + r2) ...); NCCL's order is its
  // own (identical on every rank for a fixed topology, but not rank order).
  virtual void all_reduce_sum(float* data, int64_t count) = 0;
  // recv <- every rank's send block one after another; rank r's block holds counts[r] values
  // (blocks may differ in size), send holds counts[rank()].
  virtual void all_gather(const float* send, float* recv, std::span<const int64_t> counts) = 0;
  // data <- root's `bytes` bytes at data, on every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // broadcast() of a message the other ranks may wait long for (a follower waiting for rank 0's
  // next step): where the implementation can, a waiting rank polls with growing sleeps (up to
  // about 1 ms) after a short busy spell instead of keeping a core busy. Every rank must use
  // broadcast_idle() for the same message (MPI matches a non-blocking broadcast only with
  // non-blocking ones). The default is broadcast().
  virtual void broadcast_idle(void* data, size_t bytes, int root) { broadcast(data, bytes, root); }
  virtual void barrier() = 0;
  // Ends the process of every rank with `code`: after an error on one rank the others would
  // wait in a collective forever.
  [[noreturn]] void abort(int code);

 protected:
  // Asks every rank's process to end (abort() then ends this one if it is still running).
  virtual void abort_all(int code) = 0;
};

// One rank: the collectives copy or do nothing.
std::unique_ptr<Communicator> make_single_communicator();

// True when this build has the MPI communicator (MPI was found when it was configured).
bool mpi_available();
// The ranks of the MPI job this process belongs to (MPI is initialised here and finalised when
// the last MPI communicator of the process is destroyed). Throws Error(unsupported) in a build
// without MPI.
std::unique_ptr<Communicator> make_mpi_communicator();

// True when this build has the NCCL communicator (CUDA, NCCL and MPI were all found).
bool nccl_available();
// GPUs this process sees (CUDA_VISIBLE_DEVICES applies); 0 without NCCL or without a driver.
int visible_gpus();
// The CUDA stream the collectives on device buffers are queued on (a cudaStream_t), asked at
// every collective; null means the default stream. The caller passes the backend's.
using StreamSource = void* (*)();
// One GPU rank of the MPI job `bootstrap` belongs to: selects GPU local_rank(), gets NCCL's
// unique id from rank 0 through `bootstrap` and joins the NCCL communicator of all its ranks
// (NCCL_NVLS_ENABLE defaults to 0 here). Buffers in host memory go through `bootstrap`.
// With `nodes.nnodes` > 1, `bootstrap` holds this node's ranks only: this rank is rank
// node_rank * bootstrap->size() + bootstrap->rank() of nnodes * bootstrap->size(), the id comes
// from node 0 through the rendezvous (rendezvous.h), and host buffers go through NCCL too,
// staged in device memory. Throws Error(unsupported) in a build without NCCL.
std::unique_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Communicator> bootstrap,
                                                     StreamSource stream,
                                                     const NodeGroup& nodes = {});

// Sets NCCL_NVLS_ENABLE=0 (NVLink multicast off) unless the environment already sets it.
void default_nccl_environment();
// This process's index among the ranks of its host (OMPI_COMM_WORLD_LOCAL_RANK, else
// MPI_LOCALRANKID, else `rank`: one host).
int local_rank(int rank);

// Which communicator a `--tp ranks` run uses: MPI when the model runs on the CPU, NCCL on CUDA.
enum class CommunicatorKind { single, mpi, nccl };
CommunicatorKind communicator_kind(Device device, int ranks);
// Why `--tp ranks` with the model on `device` cannot run given what the build has and how many
// GPUs this host shows, or "" when it can.
std::string tp_unavailable_reason(Device device, int ranks, bool have_mpi, bool have_nccl,
                                  int gpus);
// The same for this build and this machine.
std::string tp_unavailable_reason(Device device, int ranks);
// Why one node of a run across `nnodes` hosts (`ranks` over all of them, as many on each, one
// per GPU) cannot run given the build and how many GPUs this host shows, or "" when it can.
std::string node_unavailable_reason(int ranks, int nnodes, bool have_nccl, int gpus);
// The same for this build and this machine.
std::string node_unavailable_reason(int ranks, int nnodes);
// The communicator of this rank of a `--tp` job whose model runs on `device` (MPI, or NCCL over
// MPI with `stream` for the device collectives). With `nodes.nnodes` > 1 (NCCL only), this
// node's ranks are an MPI job (the single communicator when the node runs one rank) and the
// nodes meet through the rendezvous.
std::unique_ptr<Communicator> make_rank_communicator(Device device, StreamSource stream,
                                                     const NodeGroup& nodes = {});

}  // namespace hibana
