// Stride arithmetic of the memory formats (see memory_format.h).
#include "engine/tensor/memory_format.h"

#include <algorithm>

#include "engine/tensor/tensor.h"

namespace kiln {

const char* memory_format_name(MemoryFormat f) {
  return f == MemoryFormat::channels_last ? "channels_last" : "contiguous";
}

Shape strides_for(const Shape& sizes, MemoryFormat f) {
  Shape st(sizes.size());
  if (f == MemoryFormat::contiguous) {
    int64_t s = 1;
    for (int i = (int)sizes.size() - 1; i >= 0; --i) {
      st[i] = s;
      s *= std::max<int64_t>(sizes[i], 1);
    }
    return st;
  }
  KILN_CHECK(sizes.size() == 4, "channels_last format needs a 4-D (N, C, H, W) shape, got ", shape_str(sizes));
  const int64_t C = std::max<int64_t>(sizes[1], 1), H = std::max<int64_t>(sizes[2], 1),
                W = std::max<int64_t>(sizes[3], 1);
  st[1] = 1;
  st[3] = C;
  st[2] = W * C;
  st[0] = H * W * C;
  return st;
}

bool is_channels_last(const Tensor& t) {
  if (!t.defined() || t.dim() != 4) return false;
  int64_t expected = 1;
  for (int d : {1, 3, 2, 0}) {  // innermost to outermost in NHWC
    if (t.sizes()[d] == 1) continue;
    if (t.strides()[d] != expected) return false;
    expected *= t.sizes()[d];
  }
  return true;
}

MemoryFormat suggest_memory_format(const Tensor& t) {
  return is_channels_last(t) && !t.is_contiguous() ? MemoryFormat::channels_last : MemoryFormat::contiguous;
}

}  // namespace kiln
