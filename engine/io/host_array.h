// HostArray: a dense, C-ordered, host-resident array of bytes with a dtype and a shape. It is the
// exchange type of engine/io (safetensors, .npy, IDX) and deliberately knows nothing of Tensor,
// Storage, devices or autograd, so file formats can be read and written below the tensor layer.
// It must not grow views, strides or arithmetic: convert to a Tensor for that.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/core/error.h"
#include "engine/core/shape.h"

namespace kiln {

struct HostArray {
  DType dtype = DType::f32;
  Shape shape;                 // () is a scalar with one element
  std::vector<uint8_t> bytes;  // numel * dtype_size bytes, C order, little-endian

  int64_t numel() const { return numel_of(shape); }
  size_t nbytes() const { return bytes.size(); }

  // Typed views of the bytes; the caller picks T matching dtype (checked by size only).
  template <typename T>
  T* data() {
    KILN_CHECK(sizeof(T) == dtype_size(dtype), "HostArray::data: element size ", sizeof(T),
               " does not match dtype ", dtype_name(dtype));
    return reinterpret_cast<T*>(bytes.data());
  }
  template <typename T>
  const T* data() const {
    KILN_CHECK(sizeof(T) == dtype_size(dtype), "HostArray::data: element size ", sizeof(T),
               " does not match dtype ", dtype_name(dtype));
    return reinterpret_cast<const T*>(bytes.data());
  }
};

// Byte count of a (dtype, shape) with overflow and negative-dim checks; `what` names the
// file / tensor in the error. Returns false (and leaves *out unset) when the size overflows
// int64, so callers can build their own message.
bool checked_nbytes(DType dtype, const Shape& shape, uint64_t* out);

// A zero-filled array of the given dtype and shape (throws on a negative dim or overflow).
HostArray make_host_array(DType dtype, Shape shape);

// An array holding a copy of `values` (values.size() must equal numel(shape)).
template <typename T>
HostArray host_array_from(DType dtype, Shape shape, const std::vector<T>& values) {
  HostArray a = make_host_array(dtype, std::move(shape));
  KILN_CHECK(sizeof(T) == dtype_size(dtype), "host_array_from: element size ", sizeof(T),
             " does not match dtype ", dtype_name(dtype));
  KILN_CHECK((int64_t)values.size() == a.numel(), "host_array_from: ", values.size(),
             " values for shape ", shape_str(a.shape));
  if (!values.empty()) std::memcpy(a.bytes.data(), values.data(), a.bytes.size());
  return a;
}

}  // namespace kiln
