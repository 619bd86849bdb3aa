// The CPU backend compiled for any x86-64 / ARM64 CPU (no instruction-set assumptions).
#define HIBANA_CPU_VARIANT cpu_portable
namespace hibana::cpu_portable {
constexpr const char* kVariantName = "portable";
}
#include "backend/cpu/cpu_backend_variant.inc"
