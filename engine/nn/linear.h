// Linear: y = x W^T + b, weight (out, in), bias (out). PyTorch's default init: U(+-1/sqrt(in))
// for both (kaiming_uniform with a = sqrt(5)).
#pragma once
#include "engine/nn/module.h"

namespace kiln::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  // x: (..., in) -> (..., out)
  Tensor forward(const Tensor& x) override;
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  // Redraws weight and bias from the constructor's distributions (in place).
  void reset_parameters() override;
  Tensor weight, bias;

 private:
  void init_weight();
  void init_bias();
  int64_t in_, out_;
};

}  // namespace kiln::nn
