// Tests that run as every rank of an MPI job (`mpirun -np 2 tp_tests`): the job's communicator.
#pragma once

#include <memory>

#include "parallel/communicator.h"

namespace hibana::test {

std::shared_ptr<Communicator> world();

}  // namespace hibana::test
