// Stand-ins for the NCCL communicator in a build without CUDA, NCCL or MPI.
#include "core/error.h"
#include "parallel/communicator.h"

namespace hibana {

bool nccl_available() {
  return false;
}
int visible_gpus() {
  return 0;
}
std::unique_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Communicator>, StreamSource,
                                                     const NodeGroup&) {
  throw Error(ErrorKind::unsupported,
              "this hibana was built without the NCCL communicator (CUDA, NCCL's nccl.h and "
              "libnccl, and MPI must all be found when it is configured)");
}

}  // namespace hibana
