// LR schedules (closed forms of torch's StepLR, CosineAnnealingLR, LinearLR; kiln train's ramp) and
// their parser.
#include "engine/optim/lr_schedule.h"

#include <cmath>
#include <sstream>
#include <vector>

namespace kiln::optim {

StepLR::StepLR(int64_t step_size, double gamma) : step_size_(step_size), gamma_(gamma) {
  KILN_CHECK(step_size > 0 && gamma > 0, "StepLR: step_size ", step_size, " and gamma ", gamma, " must be > 0");
}
double StepLR::factor(int64_t step) const { return std::pow(gamma_, (double)(std::max<int64_t>(step, 0) / step_size_)); }
std::string StepLR::describe() const { return str_cat("step(", step_size_, ", ", gamma_, ")"); }

CosineLR::CosineLR(int64_t total, double min_factor) : total_(total), min_(min_factor) {
  KILN_CHECK(total > 0 && min_factor >= 0 && min_factor <= 1, "CosineLR: total_steps ", total,
             " must be > 0 and min_factor ", min_factor, " in [0, 1]");
}
double CosineLR::factor(int64_t step) const {
  if (step >= total_) return min_;
  if (step <= 0) return 1.0;
  return min_ + (1.0 - min_) * 0.5 * (1.0 + std::cos(M_PI * (double)step / (double)total_));
}
std::string CosineLR::describe() const { return str_cat("cosine(", total_, ", ", min_, ")"); }

WarmupLR::WarmupLR(int64_t warmup, double start, LRSchedulePtr after)
    : warmup_(warmup), start_(start), after_(std::move(after)) {
  KILN_CHECK(warmup >= 0 && start > 0 && start <= 1, "WarmupLR: warmup_steps ", warmup,
             " must be >= 0 and start_factor ", start, " in (0, 1]");
}
double WarmupLR::factor(int64_t step) const {
  if (step < warmup_) return start_ + (1.0 - start_) * (double)std::max<int64_t>(step, 0) / (double)warmup_;
  return after_ ? after_->factor(step - warmup_) : 1.0;
}
std::string WarmupLR::describe() const {
  return str_cat("warmup(", warmup_, ", ", start_, ")", after_ ? " + " + after_->describe() : "");
}

RampLR::RampLR(int64_t ramp, LRSchedulePtr inner) : ramp_(ramp), inner_(std::move(inner)) {
  KILN_CHECK(ramp >= 0, "RampLR: ramp_steps ", ramp, " must be >= 0");
}
double RampLR::factor(int64_t step) const {
  const double f = inner_ ? inner_->factor(step) : 1.0;
  if (step < ramp_) return f * (double)(std::max<int64_t>(step, 0) + 1) / (double)ramp_;
  return f;
}
std::string RampLR::describe() const {
  return str_cat("ramp(", ramp_, ")", inner_ ? " * " + inner_->describe() : "");
}

void apply_schedule(Optimizer& opt, const LRSchedule& s, int64_t step) { opt.set_lr_factor(s.factor(step)); }

static std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

static double number(const std::string& text, const std::string& spec) {
  try {
    size_t used = 0;
    double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw Error(str_cat("schedule '", spec, "': '", text, "' is not a number"));
}

static const char* kForms = "constant, step:S[:GAMMA], cosine[:MIN_FACTOR], warmup:W[:START]+step:.. or +cosine:..";

static LRSchedulePtr parse_simple(const std::string& part, int64_t total, const std::string& spec) {
  auto f = split(part, ':');
  if (f.empty()) throw Error(str_cat("schedule '", spec, "': empty (forms: ", kForms, ")"));
  if (f[0] == "constant" && f.size() == 1) return std::make_shared<ConstantLR>();
  if (f[0] == "step" && (f.size() == 2 || f.size() == 3))
    return std::make_shared<StepLR>((int64_t)number(f[1], spec), f.size() == 3 ? number(f[2], spec) : 0.1);
  if (f[0] == "cosine" && f.size() <= 2)
    return std::make_shared<CosineLR>(std::max<int64_t>(total, 1), f.size() == 2 ? number(f[1], spec) : 0.0);
  throw Error(str_cat("schedule '", spec, "': cannot parse '", part, "' (forms: ", kForms, ")"));
}

LRSchedulePtr parse_schedule(const std::string& spec, int64_t total_steps) {
  auto parts = split(spec, '+');
  KILN_CHECK(!parts.empty() && parts.size() <= 2, "schedule '", spec, "': expected at most one '+' (forms: ", kForms,
             ")");
  auto f = split(parts[0], ':');
  if (!f.empty() && f[0] == "warmup") {
    KILN_CHECK(f.size() == 2 || f.size() == 3, "schedule '", spec, "': warmup:W[:START] (forms: ", kForms, ")");
    int64_t w = (int64_t)number(f[1], spec);
    double start = f.size() == 3 ? number(f[2], spec) : 1.0 / std::max<int64_t>(w, 1);
    LRSchedulePtr after = parts.size() == 2 ? parse_simple(parts[1], total_steps - w, spec) : nullptr;
    return std::make_shared<WarmupLR>(w, start, after);
  }
  KILN_CHECK(parts.size() == 1, "schedule '", spec, "': only warmup can be followed by '+' (forms: ", kForms, ")");
  return parse_simple(parts[0], total_steps, spec);
}

}  // namespace kiln::optim
