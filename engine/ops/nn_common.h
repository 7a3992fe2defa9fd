// Shared plumbing of the neural-network ops: dtype dispatch to the templated backend kernels,
// the f16/bf16 rule (compute in f32, round the result), and workspace allocation.
#pragma once
#include "engine/ops/dispatch.h"

namespace kiln {

// Runs BODY with `T` = float or double according to dt.
#define KILN_NN_TYPED(dt, op, ...)                                                             \
  do {                                                                                         \
    if ((dt) == ::kiln::DType::f32) {                                                          \
      using T = float;                                                                         \
      __VA_ARGS__;                                                                             \
    } else if ((dt) == ::kiln::DType::f64) {                                                   \
      using T = double;                                                                        \
      __VA_ARGS__;                                                                             \
    } else {                                                                                   \
      throw ::kiln::Error(::kiln::str_cat(op, ": dtype ", ::kiln::dtype_name(dt), " not supported")); \
    }                                                                                          \
  } while (0)

inline bool is_16bit(DType dt) { return dt == DType::f16 || dt == DType::bf16; }

// Scratch memory for a kernel, attributed to `temporary`.
inline Tensor workspace(size_t bytes, Device d) {
  MemoryScope s(MemoryTag::temporary);
  return empty({(int64_t)bytes}, DType::u8, d);
}

template <typename T>
inline T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

std::vector<int64_t> expand_pair(const std::vector<int64_t>& v, const char* op, const char* what);

}  // namespace kiln
