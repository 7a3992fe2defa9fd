// ResNet18/34 (BasicBlock) and ResNet50/101 (Bottleneck, models/bottleneck.h) with torchvision's
// exact architecture, parameter names and initialization (conv: kaiming_normal fan_out relu; BN
// weight 1 bias 0; fc: Linear's default; zero_init_residual off), any num_classes and input size
// (adaptive average pool), any number of input channels.
// small_stem: conv1 = 3x3 stride 1 padding 1 and no max-pool, for 28-64 px images; the
// parameter names are unchanged.
#pragma once
#include <memory>
#include <vector>

#include "engine/nn/batch_norm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/layers.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"
#include "models/bottleneck.h"

namespace kiln::models {

// torchvision.models.resnet.BasicBlock: conv1 (3x3, stride), bn1, relu, conv2 (3x3), bn2,
// optional downsample (Sequential of 1x1 conv with stride and BN), add, relu.
class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t inplanes, int64_t planes, int64_t stride);
  Tensor forward(const Tensor& x) override;  // (N, inplanes, H, W) -> (N, planes, H/stride, W/stride)

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::Sequential> downsample;  // null when shapes already match
};

enum class ResNetBlock { basic, bottleneck };

struct ResNetOptions {
  // blocks per stage: 18 = {2,2,2,2}, 34 = {3,4,6,3} (basic); 50 = {3,4,6,3}, 101 = {3,4,23,3} (bottleneck)
  std::vector<int64_t> layers = {2, 2, 2, 2};
  int64_t num_classes = 1000;
  int64_t in_channels = 3;
  bool small_stem = false;
  ResNetBlock block = ResNetBlock::basic;  // bottleneck: 4x wider stage outputs, fc takes 2048 features
};

class ResNet : public nn::Module {
 public:
  explicit ResNet(const ResNetOptions& o);
  // x: (N, in_channels, H, W) -> logits (N, num_classes)
  Tensor forward(const Tensor& x) override;
  // stem (conv1, bn1[, maxpool], relu), then each block (layer1.0 ... layer4.1), then head
  // (avgpool, flatten, fc): 10 stages for ResNet18, 18 for ResNet50; their chain is forward() exactly.
  std::vector<nn::Stage> stages() override;
  const ResNetOptions& options() const { return o_; }

 private:
  std::shared_ptr<nn::Sequential> make_layer(int64_t& inplanes, int64_t planes, int64_t blocks, int64_t stride);
  Tensor stem(const Tensor& x);  // (N, in_channels, H, W) -> (N, 64, H/4, W/4), small stem (N, 64, H, W)

  ResNetOptions o_;
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::shared_ptr<nn::ReLU> relu_;
  std::shared_ptr<nn::MaxPool2d> maxpool_;  // null with the small stem
  std::shared_ptr<nn::Sequential> layer_[4];
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool_;
  std::shared_ptr<nn::Linear> fc_;
};

std::shared_ptr<ResNet> resnet18(int64_t num_classes = 1000, int64_t in_channels = 3, bool small_stem = false);
std::shared_ptr<ResNet> resnet34(int64_t num_classes = 1000, int64_t in_channels = 3, bool small_stem = false);
std::shared_ptr<ResNet> resnet50(int64_t num_classes = 1000, int64_t in_channels = 3, bool small_stem = false);
std::shared_ptr<ResNet> resnet101(int64_t num_classes = 1000, int64_t in_channels = 3, bool small_stem = false);

}  // namespace kiln::models
