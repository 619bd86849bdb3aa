// Sizes for people: "512 B", "43.1 MiB", "15.3 GiB" (powers of 1024, one decimal above bytes).
#pragma once

#include <string>

namespace hibana {

std::string byte_text(double bytes);

}  // namespace hibana
