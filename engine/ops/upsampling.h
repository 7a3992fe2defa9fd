// The differentiable ops that grow a feature map, as torch.nn.functional (PyTorch 1.13):
// conv_transpose2d and interpolate (modes nearest and bilinear). Declared apart from ops.h so the
// rest of the engine need not rebuild for them; engine/kiln.h includes both.
// Shape inference is separate from compute: on the meta device they allocate exactly what a CPU run
// allocates and compute nothing. Bad arguments throw one kiln::Error naming the op and the shapes.
#pragma once
#include <string>
#include <vector>

#include "engine/ops/ops.h"
#include "engine/core/op_modes.h"

namespace kiln {

// x (N, C_in, H, W), w (C_in, C_out/groups, R, S), b (C_out) or undefined -> (N, C_out, OH, OW),
// OH = (H - 1) stride - 2 padding + dilation (R - 1) + output_padding + 1. Each of stride, padding,
// output_padding and dilation takes 1 or 2 values; output_padding must be smaller than stride or
// dilation. Autocast: lower-precision list (like conv2d). 16-bit tensors compute in f32 and round.
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(),
                        std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> padding = {0, 0},
                        std::vector<int64_t> output_padding = {0, 0}, int64_t groups = 1,
                        std::vector<int64_t> dilation = {1, 1});

// F.interpolate on x (N, C, H, W): exactly one of `size` (1 or 2 values) and `scale_factor` (1 or 2
// values, > 0; output = floor(in * scale)) must be given, the other empty. align_corners only with
// bilinear. Follows its input's dtype (16-bit computes in f32 and rounds); not autocast.
Tensor interpolate(const Tensor& x, std::vector<int64_t> size, std::vector<double> scale_factor = {},
                   InterpMode mode = InterpMode::nearest, bool align_corners = false);

// "nearest" / "bilinear" (the names torch and model files use); anything else throws naming the valid ones.
InterpMode interp_mode_from_string(const std::string& name);
const char* interp_mode_name(InterpMode mode);

}  // namespace kiln
