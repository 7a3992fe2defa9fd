// torchvision's Bottleneck block built from kiln modules (see bottleneck.h).
#include "models/bottleneck.h"

#include "engine/ops/ops.h"

namespace kiln::models {

using namespace kiln::nn;

static std::shared_ptr<Conv2d> conv_nobias(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad) {
  return std::make_shared<Conv2d>(in, out, k, stride, pad, /*bias=*/false);
}

Bottleneck::Bottleneck(int64_t inplanes, int64_t planes, int64_t stride) : Module("Bottleneck") {
  KILN_CHECK(inplanes > 0 && planes > 0 && stride > 0, "Bottleneck: bad inplanes=", inplanes, " planes=", planes,
             " stride=", stride);
  const int64_t out = planes * kExpansion;
  conv1 = register_module("conv1", conv_nobias(inplanes, planes, 1, 1, 0));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2 = register_module("conv2", conv_nobias(planes, planes, 3, stride, 1));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  conv3 = register_module("conv3", conv_nobias(planes, out, 1, 1, 0));
  bn3 = register_module("bn3", std::make_shared<BatchNorm2d>(out));
  relu = register_module("relu", std::make_shared<ReLU>(true));
  if (stride != 1 || inplanes != out) {
    auto ds = std::make_shared<Sequential>();
    ds->push_back(conv_nobias(inplanes, out, 1, stride, 0));
    ds->push_back(std::make_shared<BatchNorm2d>(out));
    downsample = register_module("downsample", ds);
  }
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor y = (*relu)((*bn1)((*conv1)(x)));  // (N, planes, H, W)
  y = (*relu)((*bn2)((*conv2)(y)));         // (N, planes, H/stride, W/stride)
  y = (*bn3)((*conv3)(y));                  // (N, 4 planes, H/stride, W/stride)
  Tensor identity = downsample ? (*downsample)(x) : x;
  add_(y, identity);
  return (*relu)(y);
}

}  // namespace kiln::models
