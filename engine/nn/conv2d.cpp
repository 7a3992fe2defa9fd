// Conv2d module over ops::conv2d.
#include "engine/nn/conv2d.h"

#include <cmath>

#include "engine/memory/tag.h"
#include "engine/nn/init.h"
#include "engine/ops/ops.h"

namespace kiln::nn {

static Conv2dOptions conv_opts(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, bool b) {
  Conv2dOptions o;
  o.in_channels = in;
  o.out_channels = out;
  o.kernel = k;
  o.stride = s;
  o.padding = p;
  o.bias = b;
  return o;
}

Conv2d::Conv2d(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding, bool bias)
    : Conv2d(conv_opts(in, out, kernel, stride, padding, bias)) {}

Conv2d::Conv2d(const Conv2dOptions& o) : Module("Conv2d"), o_(o) {
  KILN_CHECK(o.in_channels > 0 && o.out_channels > 0 && o.kernel > 0 && o.stride > 0 && o.padding >= 0 &&
                 o.dilation > 0 && o.groups > 0,
             "Conv2d: bad options in=", o.in_channels, " out=", o.out_channels, " kernel=", o.kernel,
             " stride=", o.stride, " padding=", o.padding, " dilation=", o.dilation, " groups=", o.groups);
  KILN_CHECK(o.in_channels % o.groups == 0 && o.out_channels % o.groups == 0, "Conv2d: channels ", o.in_channels,
             "->", o.out_channels, " not divisible by groups ", o.groups);
  MemoryScope ms(MemoryTag::param);
  // Registered and drawn one after the other (the allocation order kiln mem's figures rest on);
  // the draws are reset_parameters()'s.
  weight = register_parameter("weight", empty({o.out_channels, o.in_channels / o.groups, o.kernel, o.kernel}));
  init_weight();
  if (o.bias) {
    bias = register_parameter("bias", empty({o.out_channels}));
    init_bias();
  }
}

void Conv2d::init_weight() { init::kaiming_uniform_(weight, std::sqrt(5.0)); }

void Conv2d::init_bias() {
  double bound = 1.0 / std::sqrt((double)init::fan_in(weight));
  init::uniform_(bias, -bound, bound);
}

void Conv2d::reset_parameters() {
  init_weight();
  if (bias.defined()) init_bias();
}

Tensor Conv2d::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == 4 && x.size(1) == o_.in_channels, "Conv2d(", o_.in_channels, "->", o_.out_channels,
             "): expected input (N, ", o_.in_channels, ", H, W), got ", x.str());
  return conv2d(x, weight, bias, {o_.stride, o_.stride}, {o_.padding, o_.padding}, {o_.dilation, o_.dilation},
                o_.groups);
}

}  // namespace kiln::nn
