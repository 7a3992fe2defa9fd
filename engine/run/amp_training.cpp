// `kiln train --amp` helpers (see amp_training.h).
#include "engine/run/amp_training.h"

#include <cstdio>

namespace kiln {
namespace {

optim::LossScalerOptions scaler_options(const RunConfig& c) {
  optim::LossScalerOptions o;
  o.enabled = c.amp;
  o.init_scale = c.amp_init_scale;
  o.growth_interval = c.amp_growth_interval;
  return o;
}

}  // namespace

AmpTraining::AmpTraining(const RunConfig& c, Device device) : enabled_(c.amp), scaler_(scaler_options(c), device) {}

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
