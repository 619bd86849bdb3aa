#include "parallel/communicator.h"

#include <cstdlib>

namespace hibana {

void Communicator::abort(int code) {
  abort_all(code);
  std::_Exit(code);
}

}  // namespace hibana
