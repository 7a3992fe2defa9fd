// Shapes and strides (in elements), broadcasting with PyTorch's rules, and printing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

using Shape = std::vector<int64_t>;

int64_t numel_of(const Shape& s);
Shape contiguous_strides(const Shape& sizes);
std::string shape_str(const Shape& s);  // "(2, 3, 4)"
// Broadcast two shapes (right-aligned, size-1 expands); throws naming op and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Wraps a possibly negative dim into [0, ndim); throws naming the op if out of range.
int wrap_dim(int64_t dim, int64_t ndim, const char* op);

}  // namespace kiln
