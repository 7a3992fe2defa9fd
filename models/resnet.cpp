// torchvision ResNet (BasicBlock and Bottleneck variants) built from kiln modules.
#include "models/resnet.h"

#include <string>

#include "engine/memory/tag.h"
#include "engine/nn/init.h"
#include "engine/ops/ops.h"

namespace kiln::models {

using namespace kiln::nn;

static std::shared_ptr<Conv2d> conv(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad) {
  return std::make_shared<Conv2d>(in, out, k, stride, pad, /*bias=*/false);
}

BasicBlock::BasicBlock(int64_t inplanes, int64_t planes, int64_t stride) : Module("BasicBlock") {
  conv1 = register_module("conv1", conv(inplanes, planes, 3, stride, 1));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  relu = register_module("relu", std::make_shared<ReLU>(true));
  conv2 = register_module("conv2", conv(planes, planes, 3, 1, 1));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  if (stride != 1 || inplanes != planes) {
    auto ds = std::make_shared<Sequential>();
    ds->push_back(conv(inplanes, planes, 1, stride, 0));
    ds->push_back(std::make_shared<BatchNorm2d>(planes));
    downsample = register_module("downsample", ds);
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = (*relu)((*bn1)((*conv1)(x)));
  out = (*bn2)((*conv2)(out));
  Tensor identity = downsample ? (*downsample)(x) : x;
  add_(out, identity);
  return (*relu)(out);
}

ResNet::ResNet(const ResNetOptions& o) : Module("ResNet"), o_(o) {
  KILN_CHECK(o.layers.size() == 4, "ResNet: expected 4 stages, got ", o.layers.size());
  KILN_CHECK(o.num_classes > 0 && o.in_channels > 0, "ResNet: bad num_classes=", o.num_classes,
             " in_channels=", o.in_channels);
  conv1_ = register_module("conv1", o.small_stem ? conv(o.in_channels, 64, 3, 1, 1) : conv(o.in_channels, 64, 7, 2, 3));
  bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(64));
  relu_ = register_module("relu", std::make_shared<ReLU>(true));
  if (!o.small_stem) maxpool_ = register_module("maxpool", std::make_shared<MaxPool2d>(3, 2, 1));
  int64_t inplanes = 64;
  const int64_t planes[4] = {64, 128, 256, 512};
  for (int i = 0; i < 4; ++i)
    layer_[i] = register_module("layer" + std::to_string(i + 1),
                                make_layer(inplanes, planes[i], o.layers[i], i == 0 ? 1 : 2));
  avgpool_ = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(1));
  const int64_t expansion = o.block == ResNetBlock::bottleneck ? Bottleneck::kExpansion : 1;
  fc_ = register_module("fc", std::make_shared<Linear>(512 * expansion, o.num_classes));

  // torchvision's re-initialization of every conv and BN (fc keeps Linear's default).
  apply([](const std::string&, Module& m) {
    if (auto* c = dynamic_cast<Conv2d*>(&m))
      init::kaiming_normal_(c->weight, 0.0, init::FanMode::fan_out, "relu");
    else if (auto* bn = dynamic_cast<BatchNorm2d*>(&m)) {
      init::constant_(bn->weight, 1.0);
      init::constant_(bn->bias, 0.0);
    }
  });
}

std::shared_ptr<Sequential> ResNet::make_layer(int64_t& inplanes, int64_t planes, int64_t blocks, int64_t stride) {
  KILN_CHECK(blocks > 0, "ResNet: a stage needs at least one block");
  auto seq = std::make_shared<Sequential>();
  if (o_.block == ResNetBlock::bottleneck) {
    seq->push_back(std::make_shared<Bottleneck>(inplanes, planes, stride));
    inplanes = planes * Bottleneck::kExpansion;
    for (int64_t b = 1; b < blocks; ++b) seq->push_back(std::make_shared<Bottleneck>(inplanes, planes, 1));
    return seq;
  }
  seq->push_back(std::make_shared<BasicBlock>(inplanes, planes, stride));
  inplanes = planes;
  for (int64_t b = 1; b < blocks; ++b) seq->push_back(std::make_shared<BasicBlock>(inplanes, planes, 1));
  return seq;
}

// conv1, bn1, relu, maxpool, with the relu after the pool: relu(max_pool(y)) == max_pool(relu(y))
// value for value (relu is monotone and keeps NaN; only a -0 may come out where +0 did; the pool's
// -inf padding is never the max of a window that holds an input), and the gradient reaches the same
// input or, where the window's max is <= 0, none in both orders. The relu and its gradient then run
// on a 4x smaller tensor.
Tensor ResNet::stem(const Tensor& x) {
  Tensor y = (*bn1_)((*conv1_)(x));  // (N, 64, H/2, W/2), small stem: (N, 64, H, W)
  if (maxpool_) y = (*maxpool_)(y);  // (N, 64, H/4, W/4)
  return (*relu_)(y);
}

Tensor ResNet::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == 4 && x.size(1) == o_.in_channels, "ResNet: expected input (N, ", o_.in_channels,
             ", H, W), got ", x.str());
  Tensor y = stem(x);                           // (N, 64, H/4, W/4), small stem: (N, 64, H, W)
  for (auto& l : layer_) y = (*l)(y);           // (N, F, H/32, W/32), small stem: H/8; F = 512, 2048
  y = (*avgpool_)(y);                           // (N, F, 1, 1)
  y = flatten(y, 1);                            // (N, F)
  return (*fc_)(y);                             // (N, num_classes)
}

std::vector<Stage> ResNet::stages() {
  std::vector<Stage> st;
  std::vector<ModulePtr> stem_modules = {conv1_, bn1_};
  if (maxpool_) stem_modules.push_back(maxpool_);
  stem_modules.push_back(relu_);
  st.push_back(Stage{"stem", stem_modules, [this](const Tensor& x) {
                       KILN_CHECK(x.dim() == 4 && x.size(1) == o_.in_channels, "ResNet: expected input (N, ",
                                  o_.in_channels, ", H, W), got ", x.str());
                       return stem(x);
                     }});
  for (int i = 0; i < 4; ++i) {
    const std::string lname = "layer" + std::to_string(i + 1);
    for (const auto& [bname, blk] : layer_[i]->children()) {
      ModulePtr b = blk;
      st.push_back(Stage{lname + "." + bname, {b}, [lname, b](const Tensor& x) {
                           ModuleScope scope(lname);  // the Sequential's path component
                           return (*b)(x);
                         }});
    }
  }
  st.push_back(Stage{"head", {avgpool_, fc_}, [this](const Tensor& x) {
                       return (*fc_)(flatten((*avgpool_)(x), 1));
                     }});
  return st;
}

std::shared_ptr<ResNet> resnet18(int64_t num_classes, int64_t in_channels, bool small_stem) {
  return std::make_shared<ResNet>(
      ResNetOptions{{2, 2, 2, 2}, num_classes, in_channels, small_stem, ResNetBlock::basic});
}

std::shared_ptr<ResNet> resnet34(int64_t num_classes, int64_t in_channels, bool small_stem) {
  return std::make_shared<ResNet>(
      ResNetOptions{{3, 4, 6, 3}, num_classes, in_channels, small_stem, ResNetBlock::basic});
}

std::shared_ptr<ResNet> resnet50(int64_t num_classes, int64_t in_channels, bool small_stem) {
  return std::make_shared<ResNet>(
      ResNetOptions{{3, 4, 6, 3}, num_classes, in_channels, small_stem, ResNetBlock::bottleneck});
}

std::shared_ptr<ResNet> resnet101(int64_t num_classes, int64_t in_channels, bool small_stem) {
  return std::make_shared<ResNet>(
      ResNetOptions{{3, 4, 23, 3}, num_classes, in_channels, small_stem, ResNetBlock::bottleneck});
}

}  // namespace kiln::models
