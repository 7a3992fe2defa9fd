// torchvision's Bottleneck block (ResNet50/101/152, "v1.5": the stride sits on the 3x3 conv), with
// torchvision's parameter names (conv1..3, bn1..3, downsample.0/1). Built and initialized by
// ResNet (models/resnet.h); it must not initialize its own weights (the ResNet re-initializes every
// conv and BN as torchvision does) and it has no zero_init_residual option (torchvision's default: off).
#pragma once
#include <memory>

#include "engine/nn/batch_norm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/layers.h"
#include "engine/nn/sequential.h"

namespace kiln::models {

// conv1 (1x1, inplanes -> planes), bn1, relu, conv2 (3x3, stride, planes -> planes), bn2, relu,
// conv3 (1x1, planes -> 4 planes), bn3, optional downsample (1x1 conv with stride + BN), add, relu.
class Bottleneck : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t inplanes, int64_t planes, int64_t stride);
  // (N, inplanes, H, W) -> (N, 4 planes, H/stride, W/stride)
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Conv2d> conv1, conv2, conv3;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2, bn3;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::Sequential> downsample;  // null when shapes already match
};

}  // namespace kiln::models
