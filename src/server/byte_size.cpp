#include "server/byte_size.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace hibana::server {

int64_t parse_byte_size(const std::string& text, const std::string& what) {
  auto bad = [&] {
    return Error(ErrorKind::invalid_argument,
                 what + ": '" + text + "' is not a size (examples: 1048576, 512MiB, 8GiB)");
  };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0) throw bad();
  char* end = nullptr;
  const std::string digits = text.substr(0, i);
  double value = std::strtod(digits.c_str(), &end);
  if (*end != '\0' || !std::isfinite(value)) throw bad();
  std::string unit;
  for (size_t k = i; k < text.size(); ++k) {
    if (!std::isspace(static_cast<unsigned char>(text[k]))) {
      unit += static_cast<char>(std::toupper(static_cast<unsigned char>(text[k])));
    }
  }
  double scale = 1;
  if (!unit.empty() && unit != "B") {
    const std::string prefixes = "KMGT";
    size_t p = prefixes.find(unit[0]);
    if (p == std::string::npos) throw bad();
    std::string rest = unit.substr(1);
    double base;
    if (rest.empty() || rest == "IB") {
      base = 1024;
    } else if (rest == "B") {
      base = 1000;
    } else {
      throw bad();
    }
    scale = std::pow(base, static_cast<double>(p + 1));
  }
  const double bytes = value * scale;
  if (bytes < 0 || bytes > 9.0e18) throw bad();
  return static_cast<int64_t>(bytes);
}

}  // namespace hibana::server
