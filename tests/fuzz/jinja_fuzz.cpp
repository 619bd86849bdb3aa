// libFuzzer target; what it checks is in checks/jinja.h.
#include "fuzz/checks/fuzz_entry.h"
#include "fuzz/checks/jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return hibana::fuzz::run_fuzz_check(data, size, hibana::fuzz::check_jinja);
}
