// The segmentation confusion matrix on the CPU (see kernels/common/api/confusion.inc): targets are
// checked first (one error naming the first bad pixel, nothing added), then OpenMP over images
// with one K x K matrix per thread, added up at the end (integer counts: the order does not matter).
// No tensor allocation beyond the per-thread host vectors.
#pragma once
#include <cstdint>

namespace kiln::cpu {

#include "kernels/common/api/confusion.inc"

}  // namespace kiln::cpu
