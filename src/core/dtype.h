// Element types of tensors, including the storage formats of checkpoints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace hibana {

enum class DType : uint8_t {
  f32,
  f16,
  bf16,
  f8_e4m3,  // OCP FP8 E4M3 ("e4m3fn": no infinities, 0x7f/0xff are NaN)
  f64,
  i64,
  i32,
  i16,
  i8,
  u8,
  boolean,
};

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // lower-case name used in messages and `hibana info`
// Maps a safetensors dtype string ("F32", "BF16", "F8_E4M3", ...) to a DType.
std::optional<DType> dtype_from_safetensors(std::string_view s);
std::optional<DType> dtype_from_name(std::string_view s);  // "f32", "bf16", "fp8", ...
bool dtype_is_float(DType t);

}  // namespace hibana
