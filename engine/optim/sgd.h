// SGD with momentum, dampening, Nesterov and (coupled, L2) weight decay: torch.optim.SGD's
// semantics, including the momentum buffer starting as the first (decayed) gradient.
#pragma once
#include "engine/optim/optimizer.h"

namespace kiln::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  // Groups keep their own lr / weight_decay; opts supplies momentum, dampening, nesterov.
  SGD(std::vector<ParamGroup> groups, const SGDOptions& opts);
  // All parameters in one group with opts.lr and opts.weight_decay (minus those no_decay excludes).
  SGD(const NamedTensors& params, const SGDOptions& opts, const NoDecayFn& no_decay = nullptr);
  const SGDOptions& options() const { return o_; }

 protected:
  void update(const std::string& name, Tensor& p, const Tensor& g, const ParamGroup& group) override;
  std::vector<std::string> state_keys() const override;

 private:
  SGDOptions o_;
};

}  // namespace kiln::optim
