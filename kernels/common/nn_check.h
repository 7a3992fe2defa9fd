// Shape checks of the convolution and pooling descriptors, for every device: the ops (engine/ops)
// call them before dispatching, and each backend's entry points call them again. Each throws one
// kiln::Error naming the op and the whole descriptor. Must not touch memory or know a device.
#pragma once
#include <string>

#include "kernels/common/nn_desc.h"

namespace kiln {

// Unless the desc is a valid convolution: positive sizes, groups dividing both channel counts,
// stride and dilation >= 1, padding >= 0, an output of at least 1x1.
void conv2d_check(const Conv2dDesc& d, const char* op);

// Unless the pooling desc is valid (as PyTorch: padding at most half the kernel, output at least 1x1).
void pool2d_check(const Pool2dDesc& d, const char* op);
// "x (N, C, H, W), kernel (kh, kw), stride (..), padding (..), dilation (..), ceil_mode b" for errors.
std::string pool2d_desc_str(const Pool2dDesc& d);

}  // namespace kiln
