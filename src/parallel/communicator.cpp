#include "parallel/communicator.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"

namespace hibana {

void Communicator::abort(int code) {
  abort_all(code);
  std::_Exit(code);
}

void default_nccl_environment() {
  // NVLink multicast (NVLS) stays off unless the user asks for it; NCCL's other variables are
  // the user's.
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
}

int local_rank(int rank) {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}) {
    const char* v = std::getenv(var);
    if (!v || !*v) continue;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    check(*end == '\0' && n >= 0 && n < 1 << 20, ErrorKind::invalid_argument,
          std::string(var) + "='" + v + "' is not a local rank");
    return static_cast<int>(n);
  }
  return rank;
}

CommunicatorKind communicator_kind(Device device, int ranks) {
  if (ranks <= 1) return CommunicatorKind::single;
  return device == Device::cuda ? CommunicatorKind::nccl : CommunicatorKind::mpi;
}

std::string tp_unavailable_reason(Device device, int ranks, bool have_mpi, bool have_nccl,
                                  int gpus) {
  const std::string tp = "--tp " + std::to_string(ranks);
  switch (communicator_kind(device, ranks)) {
    case CommunicatorKind::single:
      return {};
    case CommunicatorKind::mpi:
      if (have_mpi) return {};
      return "this hibana was built without MPI, so it cannot run tensor-parallel ranks on the "
             "CPU (install libopenmpi-dev and openmpi-bin, then configure again)";
    case CommunicatorKind::nccl:
      if (!have_nccl) {
        return tp +
               " --device cuda needs the NCCL communicator, and this hibana was built "
               "without it (it needs CUDA, NCCL's nccl.h and libnccl, and MPI when "
               "configured; " +
               std::string(have_mpi ? "NCCL was not found" : "MPI was not found") +
               "); --device cpu runs the ranks over MPI";
      }
      if (gpus < ranks) {
        return tp + " --device cuda runs one rank per GPU of this host and needs " +
               std::to_string(ranks) + " GPUs; this process sees " + std::to_string(gpus) +
               " (CUDA_VISIBLE_DEVICES applies)";
      }
      return {};
  }
  return {};
}

std::string tp_unavailable_reason(Device device, int ranks) {
  const bool nccl = communicator_kind(device, ranks) == CommunicatorKind::nccl;
  return tp_unavailable_reason(device, ranks, mpi_available(), nccl_available(),
                               nccl && nccl_available() ? visible_gpus() : 0);
}

std::string node_unavailable_reason(int ranks, int nnodes, bool have_nccl, int gpus) {
  if (!have_nccl) {
    return "--nnodes " + std::to_string(nnodes) +
           " needs the NCCL communicator, and this hibana was built without it (it needs CUDA, "
           "NCCL's nccl.h and libnccl, and MPI when configured)";
  }
  const int local = ranks / std::max(1, nnodes);
  if (gpus < local) {
    return "--tp " + std::to_string(ranks) + " over --nnodes " + std::to_string(nnodes) + " runs " +
           std::to_string(local) + (local == 1 ? " rank" : " ranks") +
           " on each host, one per GPU, and needs " + std::to_string(local) +
           (local == 1 ? " GPU" : " GPUs") + "; this process sees " + std::to_string(gpus) +
           " (CUDA_VISIBLE_DEVICES applies)";
  }
  return {};
}

std::string node_unavailable_reason(int ranks, int nnodes) {
  return node_unavailable_reason(ranks, nnodes, nccl_available(),
                                 nccl_available() ? visible_gpus() : 0);
}

std::unique_ptr<Communicator> make_rank_communicator(Device device, StreamSource stream,
                                                     const NodeGroup& nodes) {
  if (nodes.nnodes > 1) {
    check(device == Device::cuda, ErrorKind::unsupported,
          "a run across hosts (--nnodes) needs --device cuda (NCCL)");
    // This node's ranks; one rank needs no MPI job.
    std::shared_ptr<Communicator> local =
        nodes.ranks / nodes.nnodes > 1 ? make_mpi_communicator() : make_single_communicator();
    return make_nccl_communicator(std::move(local), stream, nodes);
  }
  if (device != Device::cuda) return make_mpi_communicator();
  // NCCL's unique id travels from rank 0 over the MPI job the ranks were started as.
  std::shared_ptr<Communicator> bootstrap = make_mpi_communicator();
  if (!nccl_available()) {
    throw Error(
        ErrorKind::unsupported,
        tp_unavailable_reason(device, std::max(2, bootstrap->size()), mpi_available(), false, 0));
  }
  return make_nccl_communicator(std::move(bootstrap), stream);
}

}  // namespace hibana
