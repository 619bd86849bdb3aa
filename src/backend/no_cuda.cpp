// Stand-ins for the CUDA backend in a build without nvcc.
#include "backend/backend.h"
#include "core/error.h"

namespace hibana {

bool cuda_available() {
  return false;
}

int cuda_shared_memory_per_block() {
  return 0;
}

bool cuda_attention_on_tensor_cores(int64_t, int64_t, int) {
  return false;
}

int64_t cuda_one_cta_split_products() {
  return 0;
}

int64_t cuda_grouped_small_passes() {
  return 0;
}

std::unique_ptr<Backend> make_cuda_backend(int) {
  throw Error(ErrorKind::unsupported,
              "this hibana was built without CUDA (nvcc was not found when it was configured)");
}

void* cuda_stream_handle() {
  return nullptr;
}

}  // namespace hibana
