// Runs a check as a libFuzzer target: a broken property or an exception other than the
// hibana::Error a check allows is printed and aborts, which libFuzzer records as a crash and
// saves the input for.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>

namespace hibana::fuzz {

template <typename Check>
int run_fuzz_check(const uint8_t* data, size_t size, Check&& check) {
  try {
    check(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz check failed: %s\n", e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "fuzz check failed: an exception that is not a std::exception\n");
    std::abort();
  }
  return 0;
}

}  // namespace hibana::fuzz
