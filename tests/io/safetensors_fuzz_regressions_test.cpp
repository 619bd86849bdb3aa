// Bugs in the safetensors parser that safetensors_fuzz (and writing it) found: a dimension past
// int64 was accepted, and came out negative, when another dimension was 0 (the element count
// stays 0, so the size check passed).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"

namespace hibana {
namespace {

using testing::HasSubstr;

// Raw file image: 8-byte length, then the header text.
std::string image(const std::string& header) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header;
}

TEST(SafetensorsFuzzRegressions, HugeDimensionBesideAZeroIsRefused) {
  for (const char* shape :
       {"[0, 18446744073709551615]", "[9223372036854775808, 0]", "[0, 4611686018427387905]"}) {
    const std::string img = image(std::string(R"({"t": {"dtype": "F32", "shape": )") + shape +
                                  R"(, "data_offsets": [0, 0]}})");
    try {
      parse_safetensors(reinterpret_cast<const uint8_t*>(img.data()), img.size(), "x", nullptr);
      ADD_FAILURE() << "accepted shape " << shape;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::corrupt_data);
      EXPECT_THAT(e.what(), HasSubstr("impossibly large shape"));
    }
  }
  const std::string ok = image(R"({"t": {"dtype": "F32", "shape": [0, 4611686018427387904],
                                  "data_offsets": [0, 0]}})");
  auto tensors =
      parse_safetensors(reinterpret_cast<const uint8_t*>(ok.data()), ok.size(), "x", nullptr);
  EXPECT_EQ(tensors.at("t").shape[1], int64_t{1} << 62);
}

}  // namespace
}  // namespace hibana
