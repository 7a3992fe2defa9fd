// Learning-rate schedules as multiplicative factors of each group's initial lr, as a function of
// the step count (the caller decides whether a step is an iteration or an epoch). Composable:
// warm-up then step or cosine. apply_schedule writes lr = initial_lr * factor(step) into every
// group; the schedule itself holds no state, so resuming needs only the step count.
#pragma once
#include <memory>
#include <string>

#include "engine/optim/optimizer.h"

namespace kiln::optim {

class LRSchedule {
 public:
  virtual ~LRSchedule() = default;
  virtual double factor(int64_t step) const = 0;
  virtual std::string describe() const = 0;
};
using LRSchedulePtr = std::shared_ptr<const LRSchedule>;

// 1 always.
class ConstantLR : public LRSchedule {
 public:
  double factor(int64_t) const override { return 1.0; }
  std::string describe() const override { return "constant"; }
};

// torch StepLR: gamma ^ floor(step / step_size).
class StepLR : public LRSchedule {
 public:
  StepLR(int64_t step_size, double gamma = 0.1);
  double factor(int64_t step) const override;
  std::string describe() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// torch CosineAnnealingLR (closed form): min + (1 - min) * (1 + cos(pi * step / total)) / 2,
// held at min after total steps. min_factor = eta_min / initial_lr.
class CosineLR : public LRSchedule {
 public:
  explicit CosineLR(int64_t total_steps, double min_factor = 0.0);
  double factor(int64_t step) const override;
  std::string describe() const override;

 private:
  int64_t total_;
  double min_;
};

// torch LinearLR from start_factor to 1 over warmup_steps, then `after` (shifted so that its step 0
// is the first step after warm-up; null = constant 1).
class WarmupLR : public LRSchedule {
 public:
  WarmupLR(int64_t warmup_steps, double start_factor, LRSchedulePtr after = nullptr);
  double factor(int64_t step) const override;
  std::string describe() const override;

 private:
  int64_t warmup_;
  double start_;
  LRSchedulePtr after_;
};

// kiln train's --warmup W: `inner`'s factor (null = 1) times (step + 1) / W for the first W steps.
// Unlike WarmupLR, `inner` is not shifted: it runs from step 0 underneath the ramp.
class RampLR : public LRSchedule {
 public:
  RampLR(int64_t ramp_steps, LRSchedulePtr inner = nullptr);
  double factor(int64_t step) const override;
  std::string describe() const override;

 private:
  int64_t ramp_;
  LRSchedulePtr inner_;
};

void apply_schedule(Optimizer& opt, const LRSchedule& s, int64_t step);

// Parses a schedule spec for the command line:
//   "constant" | "step:S[:GAMMA]" | "cosine[:MIN_FACTOR]" (over total_steps) |
//   "warmup:W[:START]+<step|cosine spec>" (cosine then spans total_steps - W).
// Errors name the spec and list the forms.
LRSchedulePtr parse_schedule(const std::string& spec, int64_t total_steps);

}  // namespace kiln::optim
