// Stand-ins for the MPI communicator in a build without MPI.
#include "core/error.h"
#include "parallel/communicator.h"
#include "parallel/launch.h"

namespace hibana {

namespace {
const char* kNoMpi =
    "this hibana was built without MPI, so it cannot run tensor-parallel ranks on the CPU "
    "(install libopenmpi-dev and openmpi-bin, then configure again)";
}  // namespace

bool mpi_available() {
  return false;
}
std::unique_ptr<Communicator> make_mpi_communicator() {
  throw Error(ErrorKind::unsupported, kNoMpi);
}
bool launched_as_ranks() {
  return false;
}
void relaunch_as_ranks(int) {
  throw Error(ErrorKind::unsupported, kNoMpi);
}

}  // namespace hibana
