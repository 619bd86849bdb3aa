#include "io/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "support/temp_dir.h"

namespace hibana {
namespace {

using testing::HasSubstr;

// Raw file image: 8-byte length, header text, then `data_bytes` bytes of data.
std::string image(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  out += header;
  out += std::string(data_bytes, '\x01');
  return out;
}

// Expects loading `content` to fail with `kind` and a message containing `needle` and the path.
void expect_error(const std::string& content, ErrorKind kind, const std::string& needle) {
  test::TempDir dir;
  dir.write("w.safetensors", content);
  try {
    SafetensorsFile f(dir.file("w.safetensors"));
    FAIL() << "loaded a bad file; expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(needle));
    EXPECT_THAT(e.what(), HasSubstr("w.safetensors"));
  }
}

TEST(Safetensors, RoundTripsTensors) {
  test::TempDir dir;
  std::vector<float> a = {1.5f, -2.0f, 3.25f, 4.0f, 5.0f, 6.0f};
  std::vector<uint16_t> b = {0x3f80, 0x4000};
  write_safetensors(dir.file("m.safetensors"),
                    {{"a", DType::f32, {2, 3}, a.data()}, {"b", DType::bf16, {2}, b.data()}},
                    {{"format", "pt"}});
  SafetensorsFile f(dir.file("m.safetensors"));
  EXPECT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  Tensor t = f.tensor("a");
  EXPECT_EQ(t.shape_string(), "[2, 3]");
  EXPECT_EQ(t.ptr<float>()[2], 3.25f);
  EXPECT_EQ(f.tensor("b").dtype, DType::bf16);
  EXPECT_THROW(f.tensor("missing"), Error);
}

TEST(Safetensors, MissingFile) {
  try {
    SafetensorsFile f("/nonexistent/dir/model.safetensors");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::not_found);
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/dir/model.safetensors"));
  }
}

TEST(Safetensors, TooShortForHeader) { expect_error("abc", ErrorKind::corrupt_data, "truncated"); }

TEST(Safetensors, HeaderLongerThanFile) {
  std::string img = image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4);
  img.resize(20);
  expect_error(img, ErrorKind::corrupt_data, "truncated");
}

TEST(Safetensors, ImplausibleHeaderLength) {
  std::string img(16, '\0');
  uint64_t n = uint64_t(1) << 40;
  std::memcpy(img.data(), &n, 8);
  expect_error(img, ErrorKind::corrupt_data, "implausible");
}

TEST(Safetensors, HeaderNotJson) {
  expect_error(image("{not json", 0), ErrorKind::corrupt_data, "not valid JSON");
}

TEST(Safetensors, TruncatedData) {
  // The header promises 16 bytes of data; only 8 are there.
  expect_error(image(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
               ErrorKind::corrupt_data, "truncated or lying header");
}

TEST(Safetensors, OffsetsDisagreeWithShape) {
  expect_error(image(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
               ErrorKind::corrupt_data, "needs 12");
}

TEST(Safetensors, OffsetsRunBackwards) {
  expect_error(image(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 8),
               ErrorKind::corrupt_data, "backwards");
}

TEST(Safetensors, UnknownDtype) {
  expect_error(image(R"({"a":{"dtype":"Q4_K","shape":[2],"data_offsets":[0,2]}})", 2),
               ErrorKind::unsupported, "unknown dtype 'Q4_K'");
}

TEST(Safetensors, OverlappingTensors) {
  expect_error(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                     12),
               ErrorKind::corrupt_data, "overlap");
}

TEST(Safetensors, ShapeOverflow) {
  expect_error(
      image(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4),
      ErrorKind::corrupt_data, "impossibly large");
}

TEST(Safetensors, MissingFields) {
  expect_error(image(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4), ErrorKind::corrupt_data,
               "no dtype");
  expect_error(image(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4), ErrorKind::corrupt_data,
               "no shape");
  expect_error(image(R"({"a":{"dtype":"F32","shape":[1]}})", 4), ErrorKind::corrupt_data,
               "data_offsets");
  expect_error(image(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
               ErrorKind::corrupt_data, "not a size");
}

}  // namespace
}  // namespace hibana
