// The CPU backend compiled with AVX2, FMA and F16C (chosen at run time when the CPU has them).
#if defined(__x86_64__)
#define HIBANA_CPU_VARIANT cpu_avx2
#define HIBANA_CPU_AVX2 1  // code under #pragma GCC target("avx2,fma,f16c")
namespace hibana::cpu_avx2 {
constexpr const char* kVariantName = "avx2";
}
#include "backend/cpu/cpu_backend_variant.inc"
#endif
