// Parameter initialization with PyTorch's formulas (torch.nn.init): fans, gains, uniform,
// normal, kaiming. Values come from kiln's Philox generator (same numbers on every device),
// so they match PyTorch's distributions, not its exact numbers. Writes in place, no autograd.
#pragma once
#include <string>

#include "engine/tensor/tensor.h"

namespace kiln::nn::init {

enum class FanMode { fan_in, fan_out };

// w: (out, in, k...) -> fan_in = in * prod(k), fan_out = out * prod(k); needs dim >= 2.
int64_t fan_in(const Tensor& w);
int64_t fan_out(const Tensor& w);
// torch.nn.init.calculate_gain for "linear", "relu", "leaky_relu" (param = slope), "tanh", "sigmoid".
double gain(const std::string& nonlinearity, double param = 0.01);

// While one lives on this thread, uniform_ and normal_ (and so the kaiming ones) leave values as
// they are and draw no random numbers: for models built only for their structure (a memory
// prediction moves them to the meta device), where random init is most of the build's time.
class SkipRandomInitGuard {
 public:
  SkipRandomInitGuard();
  ~SkipRandomInitGuard();
  SkipRandomInitGuard(const SkipRandomInitGuard&) = delete;
  SkipRandomInitGuard& operator=(const SkipRandomInitGuard&) = delete;
 private:
  bool prev_;
};

void uniform_(Tensor& t, double lo, double hi);
void normal_(Tensor& t, double mean, double std);
void constant_(Tensor& t, double v);
// bound = gain(nonlinearity, a) * sqrt(3 / fan): kaiming_uniform_(w, sqrt(5)) gives U(+-1/sqrt(fan_in)).
void kaiming_uniform_(Tensor& w, double a = 0.0, FanMode mode = FanMode::fan_in,
                      const std::string& nonlinearity = "leaky_relu");
// std = gain / sqrt(fan)
void kaiming_normal_(Tensor& w, double a = 0.0, FanMode mode = FanMode::fan_in,
                     const std::string& nonlinearity = "leaky_relu");

}  // namespace kiln::nn::init
