// Conv2d: weight (out, in/groups, kh, kw), optional bias (out). PyTorch's default init:
// weight kaiming_uniform(a = sqrt(5)) = U(-1/sqrt(fan_in), +1/sqrt(fan_in)), bias the same bound.
#pragma once
#include "engine/nn/module.h"

namespace kiln::nn {

struct Conv2dOptions {
  int64_t in_channels = 0, out_channels = 0;
  int64_t kernel = 3, stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = true;
};

class Conv2d : public Module {
 public:
  explicit Conv2d(const Conv2dOptions& o);
  Conv2d(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1, int64_t padding = 0, bool bias = true);
  // x: (N, in, H, W) -> (N, out, H', W')
  Tensor forward(const Tensor& x) override;
  const Conv2dOptions& options() const { return o_; }
  // Redraws weight and bias from the constructor's distributions (in place).
  void reset_parameters() override;
  Tensor weight, bias;  // bias undefined when options().bias is false

 private:
  void init_weight();
  void init_bias();
  Conv2dOptions o_;
};

}  // namespace kiln::nn
