// The mixed-precision side of a run (RunConfig::amp and amp_dtype, `kiln train --amp [f16|bf16]`): the
// autocast dtype that train::train_step runs forward + loss in, and the LossScaler built from the config that
// it drives (f16: autocast, scaled backward, unscale before clipping, step skipped on inf/NaN; bf16 and f32:
// disabled, a pass-through, since bf16 has f32's exponent range), its state for training-state files, the
// text of the progress line ("scale 65536 skipped 0" / "bf16, no loss scaling") and the ledger entries.
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

  // Autocast on (--amp f16 or bf16).
  bool enabled() const { return enabled_; }
  // The autocast dtype (f16 or bf16; meaningful when enabled()).
  DType dtype() const { return dtype_; }
  // The loss scaler runs (--amp f16 only): it has a state to save, restore and report.
  bool scaling() const { return scaler_.enabled(); }
  // The scaler's state for training checkpoints, and its restore (--resume).
  const optim::LossScaler& scaler() const { return scaler_; }
  optim::LossScaler& scaler() { return scaler_; }  // what train::train_step drives
  void load_state(double scale, int64_t growth_tracker, int64_t skipped_steps) {
    scaler_.load_state(scale, growth_tracker, skipped_steps);
  }

  double loss_scale() const { return scaler_.current_scale(); }
  int64_t skipped_steps() const { return scaler_.skipped_steps(); }
  // "  scale 65536  skipped 0" under --amp f16, "  bf16, no loss scaling" under --amp bf16, "" otherwise.
  std::string progress_text() const;
  // The start line's note: "amp: f16 autocast, loss scale 65536" / "amp: bf16 autocast, bf16, no loss scaling
  // (f32's exponent range)"; "" without --amp.
  std::string start_text() const;
  // {"enabled"} and under --amp {"dtype", "loss_scaling", "precision"} plus, for f16, {"loss_scale",
  // "skipped_steps", "init_scale", "growth_interval"}; bf16: "note": "bf16, no loss scaling".
  nlohmann::json ledger_json() const;

 private:
  bool enabled_;
  DType dtype_;
  optim::LossScaler scaler_;
};

}  // namespace kiln
