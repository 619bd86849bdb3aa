// The CUDA backend's stream for code outside backend/cuda (built with the CUDA backend only).
#include <cuda_runtime_api.h>

#include "backend/backend.h"

namespace hibana {

namespace cuda {
// Defined in cuda/cuda_backend.cu, declared for nvcc in cuda/common.cuh (which the host compiler
// cannot read).
cudaStream_t stream();
}  // namespace cuda

void* cuda_stream_handle() {
  return cuda::stream();
}

}  // namespace hibana
