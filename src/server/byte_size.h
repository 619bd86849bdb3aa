// Sizes on the command line: "1048576", "512MiB", "8GiB", "64M" (K/M/G/T and KiB/MiB/GiB/TiB
// are powers of 1024; KB/MB/GB/TB powers of 1000).
#pragma once

#include <cstdint>
#include <string>

namespace hibana::server {

// Throws Error(invalid_argument) naming `what` for anything else.
int64_t parse_byte_size(const std::string& text, const std::string& what);

}  // namespace hibana::server
