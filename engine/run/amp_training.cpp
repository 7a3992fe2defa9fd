// `kiln train --amp [f16|bf16]` helpers (see amp_training.h).
#include "engine/run/amp_training.h"

#include <cstdio>

#include "engine/core/error.h"

namespace kiln {
namespace {

optim::LossScalerOptions scaler_options(const RunConfig& c) {
  optim::LossScalerOptions o;
  o.enabled = c.amp_loss_scaling();  // bf16: a pass-through
  o.init_scale = c.amp_init_scale;
  o.growth_interval = c.amp_growth_interval;
  return o;
}

}  // namespace

AmpTraining::AmpTraining(const RunConfig& c, Device device)
    : enabled_(c.amp), dtype_(c.amp_dtype), scaler_(scaler_options(c), device) {
  KILN_CHECK(!c.amp || c.amp_dtype == DType::f16 || c.amp_dtype == DType::bf16, "--amp: dtype must be f16 or bf16, got ",
             dtype_name(c.amp_dtype));
}

std::string AmpTraining::progress_text() const {
  if (!enabled_) return "";
  if (!scaling()) return std::string("  ") + dtype_name(dtype_) + ", no loss scaling";
  char buf[64];
  std::snprintf(buf, sizeof buf, "  scale %.6g  skipped %lld", loss_scale(), (long long)skipped_steps());
  return buf;
}

std::string AmpTraining::start_text() const {
  if (!enabled_) return "";
  if (!scaling())
    return std::string("amp: ") + dtype_name(dtype_) + " autocast, " + dtype_name(dtype_) +
           ", no loss scaling (f32's exponent range)";
  char buf[96];
  std::snprintf(buf, sizeof buf, "amp: %s autocast, loss scale %.6g", dtype_name(dtype_), loss_scale());
  return buf;
}

nlohmann::json AmpTraining::ledger_json() const {
  nlohmann::json j;
  j["enabled"] = enabled_;
  if (!enabled_) return j;
  j["dtype"] = dtype_name(dtype_);
  j["precision"] = std::string("amp ") + dtype_name(dtype_);
  j["loss_scaling"] = scaling();
  if (!scaling()) {
    j["note"] = std::string(dtype_name(dtype_)) + ", no loss scaling";
    return j;
  }
  j["loss_scale"] = loss_scale();
  j["skipped_steps"] = skipped_steps();
  j["init_scale"] = scaler_.options().init_scale;
  j["growth_interval"] = scaler_.options().growth_interval;
  return j;
}

}  // namespace kiln
