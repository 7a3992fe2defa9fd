// ConvTranspose2d and Upsample modules over ops conv_transpose2d and interpolate.
#include "engine/nn/upsampling.h"

#include <cmath>

#include "engine/memory/tag.h"
#include "engine/nn/init.h"

namespace kiln::nn {

ConvTranspose2d::ConvTranspose2d(const ConvTranspose2dOptions& o) : Module("ConvTranspose2d"), o_(o) {
  KILN_CHECK(o.in_channels > 0 && o.out_channels > 0 && o.kernel > 0 && o.stride > 0 && o.padding >= 0 &&
                 o.output_padding >= 0 && o.dilation > 0 && o.groups > 0,
             "ConvTranspose2d: bad options in=", o.in_channels, " out=", o.out_channels, " kernel=", o.kernel,
             " stride=", o.stride, " padding=", o.padding, " output_padding=", o.output_padding,
             " dilation=", o.dilation, " groups=", o.groups);
  KILN_CHECK(o.in_channels % o.groups == 0 && o.out_channels % o.groups == 0, "ConvTranspose2d: channels ",
             o.in_channels, "->", o.out_channels, " not divisible by groups ", o.groups);
  KILN_CHECK(o.output_padding < o.stride || o.output_padding < o.dilation, "ConvTranspose2d: output_padding ",
             o.output_padding, " must be smaller than either stride ", o.stride, " or dilation ", o.dilation);
  MemoryScope ms(MemoryTag::param);
  weight = register_parameter("weight", empty({o.in_channels, o.out_channels / o.groups, o.kernel, o.kernel}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (o.bias) {
    bias = register_parameter("bias", empty({o.out_channels}));
    double bound = 1.0 / std::sqrt((double)init::fan_in(weight));
    init::uniform_(bias, -bound, bound);
  }
}

// The constructor's draws, in its order (it draws each tensor right after registering it).
void ConvTranspose2d::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    double bound = 1.0 / std::sqrt((double)init::fan_in(weight));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == 4 && x.size(1) == o_.in_channels, "ConvTranspose2d(", o_.in_channels, "->",
             o_.out_channels, "): expected input (N, ", o_.in_channels, ", H, W), got ", x.str());
  return conv_transpose2d(x, weight, bias, {o_.stride}, {o_.padding}, {o_.output_padding}, o_.groups,
                          {o_.dilation});
}

Upsample::Upsample(const UpsampleOptions& o) : Module("Upsample"), o_(o) {
  KILN_CHECK(o.size.empty() != o.scale_factor.empty(),
             "Upsample: exactly one of size and scale_factor must be given, got ",
             o.size.empty() ? "neither" : "both");
  KILN_CHECK(!(o.align_corners && o.mode == InterpMode::nearest),
             "Upsample: align_corners can only be set with mode bilinear");
}

Tensor Upsample::forward(const Tensor& x) {
  return interpolate(x, o_.size, o_.scale_factor, o_.mode, o_.align_corners);
}

}  // namespace kiln::nn
