// The collectives tensor parallelism needs, whatever carries them: one process per rank, each
// holding its shard of the model, exchanging activations through a Communicator.
//
// Implementations: single (one rank, nothing to exchange), MPI (ranks are processes of this
// host, buffers in host memory: the CPU backend). A NCCL communicator for GPU ranks slots in
// beside them: same calls, buffers on the GPU (device() says which), ordered on the backend's
// stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/tensor.h"

namespace hibana {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Where the buffers given to the collectives live.
  virtual Device device() const = 0;

  // data[i] <- sum over ranks of data[i], in place. The ranks' values are added in rank order
  // (((r0 + r1) + r2) ...), so every rank gets the same bits on every run.
  virtual void all_reduce_sum(float* data, int64_t count) = 0;
  // recv <- every rank's send block one after another; rank r's block holds counts[r] values
  // (blocks may differ in size), send holds counts[rank()].
  virtual void all_gather(const float* send, float* recv, std::span<const int64_t> counts) = 0;
  // data <- root's `bytes` bytes at data, on every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
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

}  // namespace hibana
