// Parameter-free layers: ReLU (optionally in place), MaxPool2d, AdaptiveAvgPool2d, Dropout,
// Flatten, Identity. Each is a thin Module over one op so it shows up in the module tree and the
// memory attribution path.
#pragma once
#include <vector>

#include "engine/nn/module.h"

namespace kiln::nn {

class ReLU : public Module {
 public:
  explicit ReLU(bool inplace = false) : Module("ReLU"), inplace_(inplace) {}
  Tensor forward(const Tensor& x) override;  // inplace: relu_ on x itself (x must not be a leaf needing grad)
  bool inplace() const { return inplace_; }

 private:
  bool inplace_;
};

class MaxPool2d : public Module {
 public:
  // stride 0 means stride = kernel (PyTorch's default)
  explicit MaxPool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0);
  Tensor forward(const Tensor& x) override;  // (N, C, H, W) -> (N, C, H', W')
  int64_t kernel() const { return k_; }
  int64_t stride() const { return s_; }
  int64_t padding() const { return p_; }

 private:
  int64_t k_, s_, p_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  AdaptiveAvgPool2d(int64_t out_h, int64_t out_w) : Module("AdaptiveAvgPool2d"), oh_(out_h), ow_(out_w) {}
  explicit AdaptiveAvgPool2d(int64_t out) : AdaptiveAvgPool2d(out, out) {}
  Tensor forward(const Tensor& x) override;  // (N, C, H, W) -> (N, C, out_h, out_w)
  int64_t out_h() const { return oh_; }
  int64_t out_w() const { return ow_; }

 private:
  int64_t oh_, ow_;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;  // identity in eval mode or when p == 0
  double p() const { return p_; }
  void set_p(double p);

 private:
  double p_;
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : Module("Flatten"), start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) override;  // (N, C, H, W) -> (N, C*H*W) by default
  int64_t start_dim() const { return start_; }
  int64_t end_dim() const { return end_; }

 private:
  int64_t start_, end_;
};

class Identity : public Module {
 public:
  Identity() : Module("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};

}  // namespace kiln::nn
