#include "engine/core/dtype.h"

#include <algorithm>
#include <cctype>

namespace kiln {

bool parse_dtype(const std::string& s, DType* out) {
  std::string l = s;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return (char)std::tolower(c); });
  if (l == "f32" || l == "float32" || l == "float") *out = DType::f32;
  else if (l == "f64" || l == "float64" || l == "double") *out = DType::f64;
  else if (l == "f16" || l == "float16" || l == "half") *out = DType::f16;
  else if (l == "bf16" || l == "bfloat16") *out = DType::bf16;
  else if (l == "i32" || l == "int32") *out = DType::i32;
  else if (l == "i64" || l == "int64" || l == "long") *out = DType::i64;
  else if (l == "u8" || l == "uint8") *out = DType::u8;
  else return false;
  return true;
}

}  // namespace kiln
