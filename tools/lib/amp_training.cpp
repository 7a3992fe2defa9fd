// `kiln train --amp` helpers (see amp_training.h).
#include "tools/lib/amp_training.h"

#include <cstdio>

#include "engine/ops/ops.h"

namespace kiln {
namespace {

optim::LossScalerOptions scaler_options(const TrainConfig& c) {
  optim::LossScalerOptions o;
  o.enabled = c.amp;
  o.init_scale = c.amp_init_scale;
  o.growth_interval = c.amp_growth_interval;
  return o;
}

}  // namespace

AmpTraining::AmpTraining(const TrainConfig& c, Device device) : enabled_(c.amp), scaler_(scaler_options(c), device) {}

std::unique_ptr<AutocastGuard> AmpTraining::region() const {
  return std::make_unique<AutocastGuard>(enabled_, DType::f16);
}

void AmpTraining::backward(const Tensor& loss) { scaler_.scale(loss).backward(); }

void AmpTraining::unscale(const std::vector<Tensor>& params) {
  if (enabled_) scaler_.unscale_(params);
}

bool AmpTraining::step(const std::vector<Tensor>& params, const std::function<void()>& optimizer_step) {
  const bool ran = scaler_.step(params, optimizer_step);
  scaler_.update();
  return ran;
}

std::string AmpTraining::progress_text() const {
  if (!enabled_) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "  scale %.6g  skipped %lld", loss_scale(), (long long)skipped_steps());
  return buf;
}

nlohmann::json AmpTraining::ledger_json() const {
  nlohmann::json j;
  j["enabled"] = enabled_;
  if (!enabled_) return j;
  j["dtype"] = "f16";
  j["loss_scale"] = loss_scale();
  j["skipped_steps"] = skipped_steps();
  j["init_scale"] = scaler_.options().init_scale;
  j["growth_interval"] = scaler_.options().growth_interval;
  return j;
}

}  // namespace kiln
