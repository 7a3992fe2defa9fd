// Argument checks of conv_transpose2d and interpolate, for every device: the ops (engine/ops) call
// them before dispatching and each backend's entry points call them again. Each throws one
// kiln::Error naming the op and the whole descriptor. Must not touch memory or know a device.
#pragma once
#include <string>

#include "kernels/common/upsample_math.h"

namespace kiln {

// "x (N, C, H, W), w (C, K/groups, R, S), stride (..), padding (..), output_padding (..), dilation (..), groups g".
std::string conv_transpose2d_desc_str(const ConvTranspose2dDesc& d);
// Unless valid as torch: positive sizes, groups dividing both channel counts, stride and dilation
// >= 1, padding >= 0, 0 <= output_padding < max(stride, dilation) per axis, an output of at least 1x1.
void conv_transpose2d_check(const ConvTranspose2dDesc& d, const char* op);

// "x (N, C, H, W) -> (N, C, OH, OW), mode m, align_corners b, scale (sh, sw)".
std::string interp2d_desc_str(const Interp2dDesc& d);
// Unless positive input and output sizes and align_corners only with bilinear.
void interp2d_check(const Interp2dDesc& d, const char* op);

}  // namespace kiln
