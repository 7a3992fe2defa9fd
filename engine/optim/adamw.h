// AdamW (decoupled weight decay), torch.optim.AdamW's semantics and defaults: lr 1e-3,
// betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2; per-parameter step counts.
#pragma once
#include "engine/optim/optimizer.h"

namespace kiln::optim {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& opts);
  AdamW(const NamedTensors& params, const AdamWOptions& opts, const NoDecayFn& no_decay = nullptr);
  const AdamWOptions& options() const { return o_; }

 protected:
  void update(const std::string& name, Tensor& p, const Tensor& g, const ParamGroup& group) override;
  std::vector<std::string> state_keys() const override { return {"exp_avg", "exp_avg_sq", "step"}; }

 private:
  AdamWOptions o_;
};

}  // namespace kiln::optim
