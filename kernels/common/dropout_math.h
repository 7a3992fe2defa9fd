// Dropout's per-element rule, shared by the CPU and CUDA backends: y = x * (keep ? scale : 0) and
// dx = dy * (keep ? scale : 0), scale = 1 / (1 - p). A dropped element is multiplied by 0, not
// replaced by 0, so a NaN or inf input (or upstream gradient) stays NaN as in torch's
// input * noise; replacing would hide a NaN from every later check. Must not draw random numbers.
#pragma once
#include "engine/core/host_device.h"

namespace kiln {

template <typename T>
KILN_HOST_DEVICE T dropout_apply(T v, bool keep, T scale) {
  return v * (keep ? scale : T(0));
}

}  // namespace kiln
