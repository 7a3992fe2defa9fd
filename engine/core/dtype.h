// Element types of kiln tensors and their sizes and names.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8 };

constexpr int kNumDTypes = 7;

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "?";
}

inline bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}

// Parses "f32", "float32", "F32" (safetensors spelling) etc.; returns false if unknown.
bool parse_dtype(const std::string& s, DType* out);

}  // namespace kiln
