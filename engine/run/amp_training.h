// The mixed-precision side of a run (RunConfig::amp, `kiln train --amp`): the LossScaler built from the
// config (disabled, a pass-through, without amp) that train::train_step drives (autocast around forward + loss,
// scaled backward, unscale before clipping, step skipped on inf/NaN), its state for training-state
// files, the text of the progress line ("scale 65536 skipped 0") and the ledger entries.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/optim/loss_scaler.h"
#include "engine/run/run_config.h"

namespace kiln {

class AmpTraining {
 public:
  AmpTraining(const RunConfig& c, Device device);

  bool enabled() const { return enabled_; }
  // The scaler's state for training checkpoints, and its restore (--resume).
  const optim::LossScaler& scaler() const { return scaler_; }
  optim::LossScaler& scaler() { return scaler_; }  // what train::train_step drives
  void load_state(double scale, int64_t growth_tracker, int64_t skipped_steps) {
    scaler_.load_state(scale, growth_tracker, skipped_steps);
  }

  double loss_scale() const { return scaler_.current_scale(); }
  int64_t skipped_steps() const { return scaler_.skipped_steps(); }
  // "  scale 65536  skipped 0" under --amp, "" otherwise.
  std::string progress_text() const;
  // {"enabled", "dtype", "loss_scale", "skipped_steps", "init_scale", "growth_interval"}.
  nlohmann::json ledger_json() const;

 private:
  bool enabled_;
  optim::LossScaler scaler_;
};

}  // namespace kiln
