// libFuzzer target; what it checks is in checks/tool_call.h (well-formed calls in the JSON form).
#include "fuzz/checks/fuzz_entry.h"
#include "fuzz/checks/tool_call.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return hibana::fuzz::run_fuzz_check(data, size, [](std::string_view input) {
    hibana::fuzz::check_tool_calls(input, hibana::fuzz::ToolCallForm::json);
  });
}
