#include "backend/backend.h"
#include "core/error.h"

namespace hibana {

std::unique_ptr<Backend> make_backend(const std::string& device) {
  if (device == "cpu") return make_cpu_backend();
  if (device == "cuda") return make_cuda_backend(0);
  if (device == "auto") return cuda_available() ? make_cuda_backend(0) : make_cpu_backend();
  throw Error(ErrorKind::invalid_argument,
              "unknown device '" + device + "' (expected auto, cpu or cuda)");
}

}  // namespace hibana
