// Convolution and pooling descriptor checks (see nn_check.h).
#include "kernels/common/nn_check.h"

#include <string>

#include "engine/core/error.h"

namespace kiln {

std::string pool2d_desc_str(const Pool2dDesc& d) {
  return str_cat("x (", d.N, ", ", d.C, ", ", d.H, ", ", d.W, "), kernel (", d.kh, ", ", d.kw, "), stride (",
                 d.stride_h, ", ", d.stride_w, "), padding (", d.pad_h, ", ", d.pad_w, "), dilation (", d.dil_h,
                 ", ", d.dil_w, "), ceil_mode ", d.ceil_mode);
}

void conv2d_check(const Conv2dDesc& d, const char* op) {
  auto desc = [&]() {
    return str_cat("x (", d.N, ", ", d.C, ", ", d.H, ", ", d.W, "), w (", d.K, ", ",
                   d.groups > 0 ? d.C / d.groups : d.C, ", ", d.R, ", ", d.S, "), stride (", d.stride_h,
                   ", ", d.stride_w, "), padding (", d.pad_h, ", ", d.pad_w, "), dilation (", d.dil_h,
                   ", ", d.dil_w, "), groups ", d.groups);
  };
  KILN_CHECK(d.N >= 0 && d.C >= 1 && d.H >= 1 && d.W >= 1 && d.K >= 1 && d.R >= 1 && d.S >= 1, op,
             ": sizes must be positive: ", desc());
  KILN_CHECK(d.groups >= 1 && d.C % d.groups == 0 && d.K % d.groups == 0, op,
             ": groups must divide in and out channels: ", desc());
  KILN_CHECK(d.stride_h >= 1 && d.stride_w >= 1 && d.dil_h >= 1 && d.dil_w >= 1 && d.pad_h >= 0 &&
                 d.pad_w >= 0,
             op, ": stride and dilation must be >= 1, padding >= 0: ", desc());
  KILN_CHECK(d.out_h() >= 1 && d.out_w() >= 1, op, ": kernel larger than padded input (output ",
             d.out_h(), " x ", d.out_w(), "): ", desc());
}

void pool2d_check(const Pool2dDesc& d, const char* op) {
  KILN_CHECK(d.N >= 0 && d.C >= 1 && d.H >= 1 && d.W >= 1 && d.kh >= 1 && d.kw >= 1, op,
             ": sizes must be positive: ", pool2d_desc_str(d));
  KILN_CHECK(d.stride_h >= 1 && d.stride_w >= 1 && d.dil_h >= 1 && d.dil_w >= 1, op,
             ": stride and dilation must be >= 1: ", pool2d_desc_str(d));
  KILN_CHECK(d.pad_h >= 0 && d.pad_w >= 0 && d.pad_h <= d.kh / 2 && d.pad_w <= d.kw / 2, op,
             ": padding must be >= 0 and at most half the kernel size: ", pool2d_desc_str(d));
  KILN_CHECK(d.out_h() >= 1 && d.out_w() >= 1, op, ": output size ", d.out_h(), " x ", d.out_w(),
             " is too small: ", pool2d_desc_str(d));
}

}  // namespace kiln
