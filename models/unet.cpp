// UNet built from kiln modules (see unet.h for the layout, the sizes and what recompute means).
#include "models/unet.h"

#include <string>

#include "engine/memory/tag.h"
#include "engine/nn/recompute.h"
#include "engine/ops/ops.h"
#include "engine/ops/upsampling.h"

namespace kiln::models {

using namespace kiln::nn;

DoubleConv::DoubleConv(int64_t in, int64_t out, int64_t mid, int64_t first_stride) : Module("DoubleConv") {
  if (mid <= 0) mid = out;
  auto seq = std::make_shared<Sequential>();
  seq->push_back(std::make_shared<Conv2d>(in, mid, 3, first_stride, 1, /*bias=*/false));
  seq->push_back(std::make_shared<BatchNorm2d>(mid));
  seq->push_back(std::make_shared<ReLU>(true));
  seq->push_back(std::make_shared<Conv2d>(mid, out, 3, 1, 1, /*bias=*/false));
  seq->push_back(std::make_shared<BatchNorm2d>(out));
  seq->push_back(std::make_shared<ReLU>(true));
  double_conv = register_module("double_conv", seq);
}

Tensor DoubleConv::forward(const Tensor& x) { return (*double_conv)(x); }

UNetDown::UNetDown(int64_t in, int64_t out) : Module("Down") {
  auto seq = std::make_shared<Sequential>();
  seq->push_back(std::make_shared<MaxPool2d>(2));
  seq->push_back(std::make_shared<DoubleConv>(in, out));
  maxpool_conv = register_module("maxpool_conv", seq);
}

Tensor UNetDown::forward(const Tensor& x) { return (*maxpool_conv)(x); }

UNetUp::UNetUp(int64_t in, int64_t out, bool bilinear) : Module("Up") {
  if (bilinear) {
    UpsampleOptions uo;
    uo.scale_factor = {2.0};
    uo.mode = InterpMode::bilinear;
    uo.align_corners = true;
    up = register_module("up", std::make_shared<Upsample>(uo));
    conv = register_module("conv", std::make_shared<DoubleConv>(in, out, in / 2));
  } else {
    ConvTranspose2dOptions co;
    co.in_channels = in;
    co.out_channels = in / 2;
    co.kernel = 2;
    co.stride = 2;
    up = register_module("up", std::make_shared<ConvTranspose2d>(co));
    conv = register_module("conv", std::make_shared<DoubleConv>(in, out));
  }
}

Tensor UNetUp::forward(const Tensor& x) {
  throw Error(str_cat("UNet Up block '", name(), "' takes two inputs (from below and the skip), got one: ", x.str()));
}

Tensor UNetUp::up_cat(const Tensor& x1, const Tensor& x2) {
  Tensor u = (*up)(x1);  // (N, C1, 2h, 2w)
  const int64_t dy = x2.size(2) - u.size(2), dx = x2.size(3) - u.size(3);
  KILN_CHECK(dy >= 0 && dx >= 0, "UNet ", name(), ": upsampled ", u.str(), " is larger than the skip ", x2.str());
  if (dy > 0 || dx > 0) u = pad(u, {dx / 2, dx - dx / 2, dy / 2, dy - dy / 2});
  return cat({x2, u}, 1);  // (N, C2 + C1, H, W)
}

UNetOutConv::UNetOutConv(int64_t in, int64_t out) : Module("OutConv") {
  conv = register_module("conv", std::make_shared<Conv2d>(in, out, 1, 1, 0, /*bias=*/true));
}

Tensor UNetOutConv::forward(const Tensor& x) { return (*conv)(x); }

UNet::UNet(const UNetOptions& o) : Module("UNet"), o_(o) {
  KILN_CHECK(o.in_channels >= 1 && o.num_classes >= 1, "UNet: bad in_channels=", o.in_channels,
             " num_classes=", o.num_classes);
  KILN_CHECK(o.depth >= 1 && o.depth <= 8, "UNet: depth must be in 1..8, got ", o.depth);
  KILN_CHECK(o.base_width >= 2 && o.base_width <= 4096, "UNet: base width must be in 2..4096, got ", o.base_width);
  KILN_CHECK(o.first_stride == 1 || o.first_stride == 2, "UNet: first conv stride must be 1 or 2, got ",
             o.first_stride);
  const int64_t D = o.depth, f = o.bilinear ? 2 : 1;
  auto w = [&](int64_t i) { return o.base_width << i; };
  inc_ = register_module("inc", std::make_shared<DoubleConv>(o.in_channels, w(0), 0, o.first_stride));
  for (int64_t i = 1; i <= D; ++i)
    down_.push_back(register_module("down" + std::to_string(i),
                                    std::make_shared<UNetDown>(w(i - 1), i == D ? w(i) / f : w(i))));
  for (int64_t j = 1; j <= D; ++j)
    up_.push_back(register_module("up" + std::to_string(j),
                                  std::make_shared<UNetUp>(w(D - j + 1), j == D ? w(0) : w(D - j) / f, o.bilinear)));
  outc_ = register_module("outc", std::make_shared<UNetOutConv>(w(0), o.num_classes));
}

int64_t UNet::min_size() const { return (int64_t(1) << o_.depth) * o_.first_stride; }

Tensor UNet::forward(const Tensor& x) { return run(x, 0); }

std::vector<Stage> UNet::stages() {
  std::vector<ModulePtr> mods{inc_};
  for (auto& d : down_) mods.push_back(d);
  for (auto& u : up_) mods.push_back(u);
  mods.push_back(outc_);
  return {Stage{"unet", mods, [this](const Tensor& x) { return run(x, recompute_segments()); }}};
}

Tensor UNet::run(const Tensor& x, int levels) {
  KILN_CHECK(x.dim() == 4 && x.size(1) == o_.in_channels, "UNet: expected input (N, ", o_.in_channels,
             ", H, W), got ", x.str());
  KILN_CHECK(x.size(2) >= min_size() && x.size(3) >= min_size(), "UNet: input ", x.str(), " is smaller than ",
             min_size(), " x ", min_size(), " (depth ", o_.depth, (o_.first_stride == 2 ? ", stride-2 first conv" : ""),
             "): the bottleneck would be empty");
  const int64_t D = o_.depth;
  // Runs block m on x, recomputed in backward when its resolution level is among the top `levels`.
  auto block = [&](const ModulePtr& m, const Tensor& in, int64_t level, const std::string& label) {
    if (level >= levels) return (*m)(in);
    return recompute([m](const Tensor& t) { return (*m)(t); }, in, m->parameters(), label);
  };
  std::vector<Tensor> skips;  // skips[i]: output of level i (inc = level 0), (N, w_i, H / 2^i, W / 2^i)
  skips.push_back(block(inc_, x, 0, "inc"));
  for (int64_t i = 1; i <= D; ++i) skips.push_back(block(down_[i - 1], skips.back(), i, "down" + std::to_string(i)));
  Tensor y = skips.back();  // (N, w_D / f, H / 2^D, W / 2^D)
  for (int64_t j = 1; j <= D; ++j) {
    UNetUp& u = *up_[j - 1];
    const int64_t level = D - j;  // the resolution this Up outputs at
    ModuleScope scope(u.name());
    auto run_up = [&u](const std::vector<Tensor>& v) {
      return (*u.conv)(u.up_cat(v[0], v[1]));  // cat: (N, w_(level+1), H / 2^level, W / 2^level)
    };
    // Recomputed: only the two inputs are kept (the skip is kept by the encoder anyway), not the
    // concatenation, the upsampled map or the DoubleConv's activations.
    y = level < levels ? recompute(run_up, {y, skips[level]}, u.parameters(), "up" + std::to_string(j))
                       : run_up({y, skips[level]});
    skips[level + 1] = Tensor();  // the level below is no longer needed by this function
  }
  Tensor logits = (*outc_)(y);  // (N, K, H', W'); H' = H, or ceil(H / 2) with the stride-2 first conv
  if (logits.size(2) != x.size(2) || logits.size(3) != x.size(3))
    logits = interpolate(logits, {x.size(2), x.size(3)}, {}, InterpMode::bilinear, false);
  return logits;  // (N, num_classes, H, W)
}

std::shared_ptr<UNet> unet(const UNetOptions& o) { return std::make_shared<UNet>(o); }

}  // namespace kiln::models
