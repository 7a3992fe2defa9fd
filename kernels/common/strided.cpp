#include "kernels/common/strided.h"

namespace kiln {

void coalesce_dims(LoopShape& shape, StridedOperand* ops, int nops) {
  LoopShape s;
  int64_t st[4][kMaxDims];
  int n = 0;
  for (int d = 0; d < shape.ndim; ++d) {
    if (shape.sizes[d] == 1) continue;
    if (n > 0) {
      bool merge = true;
      for (int k = 0; k < nops; ++k)
        if (st[k][n - 1] != ops[k].strides[d] * shape.sizes[d]) merge = false;
      if (merge) {
        s.sizes[n - 1] *= shape.sizes[d];
        for (int k = 0; k < nops; ++k) st[k][n - 1] = ops[k].strides[d];
        continue;
      }
    }
    s.sizes[n] = shape.sizes[d];
    for (int k = 0; k < nops; ++k) st[k][n] = ops[k].strides[d];
    ++n;
  }
  if (n == 0) {
    s.sizes[0] = shape.sizes[0] == 0 || shape.ndim == 0 ? (shape.ndim == 0 ? 1 : shape.sizes[0]) : 1;
    for (int d = 0; d < shape.ndim; ++d)
      if (shape.sizes[d] == 0) s.sizes[0] = 0;
    for (int k = 0; k < nops; ++k) st[k][0] = 1;
    n = 1;
  }
  s.ndim = n;
  shape = s;
  for (int k = 0; k < nops; ++k)
    for (int d = 0; d < kMaxDims; ++d) ops[k].strides[d] = d < n ? st[k][d] : 0;
}

}  // namespace kiln
