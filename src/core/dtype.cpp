#include "core/dtype.h"

namespace hibana {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::f8_e4m3: return 1;
    case DType::f64: return 8;
    case DType::i64: return 8;
    case DType::i32: return 4;
    case DType::i16: return 2;
    case DType::i8: return 1;
    case DType::u8: return 1;
    case DType::boolean: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f8_e4m3: return "fp8-e4m3";
    case DType::f64: return "f64";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::i16: return "i16";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
  }
  return "?";
}

std::optional<DType> dtype_from_safetensors(std::string_view s) {
  if (s == "F32") return DType::f32;
  if (s == "F16") return DType::f16;
  if (s == "BF16") return DType::bf16;
  if (s == "F8_E4M3") return DType::f8_e4m3;
  if (s == "F64") return DType::f64;
  if (s == "I64") return DType::i64;
  if (s == "I32") return DType::i32;
  if (s == "I16") return DType::i16;
  if (s == "I8") return DType::i8;
  if (s == "U8") return DType::u8;
  if (s == "BOOL") return DType::boolean;
  return std::nullopt;
}

std::optional<DType> dtype_from_name(std::string_view s) {
  if (s == "f32" || s == "float32" || s == "fp32") return DType::f32;
  if (s == "f16" || s == "float16" || s == "fp16") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "fp8" || s == "f8" || s == "fp8-e4m3" || s == "f8_e4m3") return DType::f8_e4m3;
  return std::nullopt;
}

bool dtype_is_float(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f8_e4m3 ||
         t == DType::f64;
}

}  // namespace hibana
