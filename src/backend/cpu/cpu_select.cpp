// Picks the CPU backend variant: AVX2+FMA+F16C when the processor has them, unless
// HIBANA_CPU=portable asks for the portable build.
#include <cstdlib>
#include <cstring>

#include "backend/backend.h"
#include "core/error.h"

namespace hibana {
namespace cpu_portable {
std::unique_ptr<Backend> make_backend();
}
#if defined(__x86_64__)
namespace cpu_avx2 {
std::unique_ptr<Backend> make_backend();
}
#endif

std::unique_ptr<Backend> make_cpu_backend() {
  const char* want = std::getenv("HIBANA_CPU");
  if (want && *want && std::strcmp(want, "portable") != 0 && std::strcmp(want, "avx2") != 0) {
    throw Error(ErrorKind::invalid_argument,
                std::string("HIBANA_CPU='") + want + "' (expected portable or avx2)");
  }
#if defined(__x86_64__)
  const bool has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                        __builtin_cpu_supports("f16c");
  if (want && std::strcmp(want, "avx2") == 0 && !has_avx2) {
    throw Error(ErrorKind::unsupported, "HIBANA_CPU=avx2 but this CPU lacks AVX2/FMA/F16C");
  }
  if (has_avx2 && !(want && std::strcmp(want, "portable") == 0)) return cpu_avx2::make_backend();
#endif
  return cpu_portable::make_backend();
}

}  // namespace hibana
