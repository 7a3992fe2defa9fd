// HostArray helpers: sizes with overflow checks and construction.
#include "engine/io/host_array.h"

#include <limits>

namespace kiln {

bool checked_nbytes(DType dtype, const Shape& shape, uint64_t* out) {
  // Limit to int64 so every byte count and offset fits the signed types used elsewhere.
  const uint64_t limit = (uint64_t)std::numeric_limits<int64_t>::max();
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d != 0 && n > limit / (uint64_t)d) return false;
    n *= (uint64_t)d;
  }
  *out = n;
  return true;
}

HostArray make_host_array(DType dtype, Shape shape) {
  uint64_t n = 0;
  KILN_CHECK(checked_nbytes(dtype, shape, &n), "make_host_array: invalid shape ", shape_str(shape),
             " for dtype ", dtype_name(dtype));
  HostArray a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  a.bytes.assign((size_t)n, 0);
  return a;
}

}  // namespace kiln
