// libFuzzer target; what it checks is in checks/bpe_encode.h.
#include "fuzz/checks/bpe_encode.h"
#include "fuzz/checks/fuzz_entry.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  hibana::fuzz::qwen3_fixture();  // load the tokenizer once, before the first input
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return hibana::fuzz::run_fuzz_check(data, size, [](std::string_view input) {
    hibana::fuzz::check_bpe_encode(hibana::fuzz::qwen3_fixture(), input);
  });
}
