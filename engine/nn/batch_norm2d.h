// BatchNorm2d: weight (C) = 1, bias (C) = 0, buffers running_mean (C) = 0, running_var (C) = 1,
// num_batches_tracked () i64 = 0, like PyTorch. Train mode normalizes with batch statistics and
// updates the running stats (momentum 0.1, unbiased variance) and the batch counter; eval mode
// uses the running stats.
#pragma once
#include "engine/nn/module.h"

namespace kiln::nn {

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1);
  // x: (N, C, H, W) -> same shape
  Tensor forward(const Tensor& x) override;
  int64_t num_features() const { return c_; }
  double eps() const { return eps_; }
  double momentum() const { return momentum_; }
  // weight 1, bias 0, running_mean 0, running_var 1, num_batches_tracked 0 (in place).
  void reset_parameters() override;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  int64_t c_;
  double eps_, momentum_;
};

}  // namespace kiln::nn
