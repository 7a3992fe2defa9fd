// interpolate (F.interpolate, nearest and bilinear): x (N, C, H, W) -> y (N, C, OH, OW).
// Output size and the scale handed to the kernels follow torch 1.13: from `size`, the kernels use
// in/out; from `scale_factor`, OH = floor(H * scale) and the kernels use 1/scale. Saves nothing for
// backward (the gradient needs only the shapes). 16-bit inputs compute in f32 and round; a
// channels-last input is resized in NCHW and given back channels-last.
#include <cmath>

#include "engine/ops/nn_common.h"
#include "engine/ops/upsampling.h"
#include "kernels/common/upsample_check.h"
#include "kernels/cpu/interpolate.h"

namespace kiln {

InterpMode interp_mode_from_string(const std::string& name) {
  if (name == "nearest") return InterpMode::nearest;
  if (name == "bilinear") return InterpMode::bilinear;
  throw Error(str_cat("interpolate: unknown mode '", name, "' (valid: nearest, bilinear)"));
}

const char* interp_mode_name(InterpMode mode) { return mode == InterpMode::nearest ? "nearest" : "bilinear"; }

namespace {

Interp2dDesc interp_desc(const Tensor& x, const std::vector<int64_t>& size, const std::vector<double>& scale,
                         InterpMode mode, bool align_corners) {
  const char* op = "interpolate";
  KILN_CHECK(x.dim() == 4, op, ": input must be 4-D (N, C, H, W), got ", x.str());
  KILN_CHECK(size.empty() != scale.empty(), op, ": exactly one of size and scale_factor must be given, got ",
             size.empty() ? "neither" : "both", " for input ", x.str());
  Interp2dDesc d;
  d.N = x.size(0), d.C = x.size(1), d.H = x.size(2), d.W = x.size(3);
  d.mode = mode;
  d.align_corners = align_corners;
  if (!size.empty()) {
    KILN_CHECK(size.size() == 1 || size.size() == 2, op, ": size needs 1 or 2 values, got ", size.size(),
               " for input ", x.str());
    d.OH = size[0];
    d.OW = size.size() == 2 ? size[1] : size[0];
  } else {
    KILN_CHECK(scale.size() == 1 || scale.size() == 2, op, ": scale_factor needs 1 or 2 values, got ",
               scale.size(), " for input ", x.str());
    d.scale_h = scale[0];
    d.scale_w = scale.size() == 2 ? scale[1] : scale[0];
    KILN_CHECK(d.scale_h > 0 && d.scale_w > 0 && std::isfinite(d.scale_h) && std::isfinite(d.scale_w), op,
               ": scale_factor must be positive and finite, got (", d.scale_h, ", ", d.scale_w, ") for input ",
               x.str());
    d.OH = (int64_t)std::floor((double)d.H * d.scale_h);
    d.OW = (int64_t)std::floor((double)d.W * d.scale_w);
  }
  interp2d_check(d, op);
  return d;
}

}  // namespace

Tensor interpolate(const Tensor& x, std::vector<int64_t> size, std::vector<double> scale_factor, InterpMode mode,
                   bool align_corners) {
  check_defined(x, "interpolate", "input");
  const Interp2dDesc d = interp_desc(x, size, scale_factor, mode, align_corners);
  if (suggest_memory_format(x) == MemoryFormat::channels_last)  // no NHWC kernel: resize in NCHW
    return contiguous(interpolate(contiguous(x), size, scale_factor, mode, align_corners),
                      MemoryFormat::channels_last);
  if (is_16bit(x.dtype()))
    return to_dtype(interpolate(to_dtype(x, DType::f32), size, scale_factor, mode, align_corners), x.dtype());
  check_floating(x, "interpolate");
  Tensor xc = contiguous(x.detach());
  Tensor y = empty({d.N, d.C, d.OH, d.OW}, x.dtype(), x.device());
  KILN_NN_TYPED(x.dtype(), "interpolate",
                KILN_DISPATCH(x.device(), interpolate2d_forward<T>, d, ptr<T>(xc), ptr<T>(y)));
  record_op("interpolate", {x}, {y}, [d](FunctionNode&, const std::vector<Tensor>& g) {
    Tensor dy = contiguous(g[0]);
    Tensor dx = empty({d.N, d.C, d.H, d.W}, dy.dtype(), dy.device());
    KILN_NN_TYPED(dy.dtype(), "interpolate backward",
                  KILN_DISPATCH(dy.device(), interpolate2d_backward<T>, d, ptr<T>(dy), ptr<T>(dx)));
    return std::vector<Tensor>{dx};
  });
  return y;
}

}  // namespace kiln
