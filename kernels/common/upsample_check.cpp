// conv_transpose2d and interpolate argument checks (see upsample_check.h).
#include "kernels/common/upsample_check.h"

#include "engine/core/error.h"

namespace kiln {

std::string conv_transpose2d_desc_str(const ConvTranspose2dDesc& d) {
  return str_cat("x (", d.N, ", ", d.C, ", ", d.H, ", ", d.W, "), w (", d.C, ", ",
                 d.groups > 0 ? d.K / d.groups : d.K, ", ", d.R, ", ", d.S, "), stride (", d.stride_h, ", ",
                 d.stride_w, "), padding (", d.pad_h, ", ", d.pad_w, "), output_padding (", d.outpad_h, ", ",
                 d.outpad_w, "), dilation (", d.dil_h, ", ", d.dil_w, "), groups ", d.groups);
}

void conv_transpose2d_check(const ConvTranspose2dDesc& d, const char* op) {
  KILN_CHECK(d.N >= 0 && d.C >= 1 && d.H >= 1 && d.W >= 1 && d.K >= 1 && d.R >= 1 && d.S >= 1, op,
             ": sizes must be positive: ", conv_transpose2d_desc_str(d));
  KILN_CHECK(d.groups >= 1 && d.C % d.groups == 0 && d.K % d.groups == 0, op,
             ": groups must divide in and out channels: ", conv_transpose2d_desc_str(d));
  KILN_CHECK(d.stride_h >= 1 && d.stride_w >= 1 && d.dil_h >= 1 && d.dil_w >= 1, op,
             ": stride and dilation must be >= 1: ", conv_transpose2d_desc_str(d));
  KILN_CHECK(d.pad_h >= 0 && d.pad_w >= 0, op, ": padding must be >= 0: ", conv_transpose2d_desc_str(d));
  KILN_CHECK(d.outpad_h >= 0 && d.outpad_w >= 0 &&
                 (d.outpad_h < d.stride_h || d.outpad_h < d.dil_h) &&
                 (d.outpad_w < d.stride_w || d.outpad_w < d.dil_w),
             op, ": output_padding must be >= 0 and smaller than either stride or dilation: ",
             conv_transpose2d_desc_str(d));
  KILN_CHECK(d.out_h() >= 1 && d.out_w() >= 1, op, ": padding leaves an empty output (", d.out_h(), " x ",
             d.out_w(), "): ", conv_transpose2d_desc_str(d));
}

std::string interp2d_desc_str(const Interp2dDesc& d) {
  return str_cat("x (", d.N, ", ", d.C, ", ", d.H, ", ", d.W, ") -> (", d.N, ", ", d.C, ", ", d.OH, ", ", d.OW,
                 "), mode ", d.mode == InterpMode::nearest ? "nearest" : "bilinear", ", align_corners ",
                 d.align_corners ? "true" : "false", ", scale (", d.scale_h, ", ", d.scale_w, ")");
}

void interp2d_check(const Interp2dDesc& d, const char* op) {
  KILN_CHECK(d.N >= 0 && d.C >= 0 && d.H >= 1 && d.W >= 1 && d.OH >= 1 && d.OW >= 1, op,
             ": input and output sizes must be greater than 0: ", interp2d_desc_str(d));
  KILN_CHECK(!(d.align_corners && d.mode == InterpMode::nearest), op,
             ": align_corners can only be set with mode bilinear: ", interp2d_desc_str(d));
}

}  // namespace kiln
