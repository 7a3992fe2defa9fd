// The layers that grow a feature map: ConvTranspose2d and Upsample, as torch.nn (1.13).
// ConvTranspose2d: weight (in, out/groups, kh, kw), optional bias (out), torch's default init
// (kaiming_uniform(a = sqrt(5)) with fan_in = weight.size(1) * kh * kw = out/groups * kh * kw, bias
// U(+-1/sqrt(fan_in))). Upsample: F.interpolate by output size or scale factor, nearest or bilinear.
#pragma once
#include <vector>

#include "engine/nn/module.h"
#include "engine/ops/upsampling.h"

namespace kiln::nn {

struct ConvTranspose2dOptions {
  int64_t in_channels = 0, out_channels = 0;
  int64_t kernel = 2, stride = 1, padding = 0, output_padding = 0, dilation = 1, groups = 1;
  bool bias = true;
};

class ConvTranspose2d : public Module {
 public:
  explicit ConvTranspose2d(const ConvTranspose2dOptions& o);
  // x: (N, in, H, W) -> (N, out, (H-1) stride - 2 padding + dilation (kernel-1) + output_padding + 1, ...)
  Tensor forward(const Tensor& x) override;
  const ConvTranspose2dOptions& options() const { return o_; }
  // Redraws weight and bias from the constructor's distributions (in place).
  void reset_parameters() override;
  Tensor weight, bias;  // bias undefined when options().bias is false

 private:
  ConvTranspose2dOptions o_;
};

struct UpsampleOptions {
  std::vector<int64_t> size;         // output (H, W) or one value for both; or empty
  std::vector<double> scale_factor;  // one or two factors; or empty (exactly one of the two is given)
  InterpMode mode = InterpMode::nearest;
  bool align_corners = false;        // bilinear only
};

class Upsample : public Module {
 public:
  explicit Upsample(const UpsampleOptions& o);
  Tensor forward(const Tensor& x) override;  // (N, C, H, W) -> (N, C, H', W')
  const UpsampleOptions& options() const { return o_; }

 private:
  UpsampleOptions o_;
};

}  // namespace kiln::nn
