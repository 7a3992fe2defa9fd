// The mixed-precision side of `kiln train --amp`: the autocast region for forward + loss, and the
// LossScaler around backward, unscale (before clipping) and the optimizer step. Without --amp
// every call is a pass-through, so the training loop has one code path. Also the text of the
// progress line ("scale 65536 skipped 0") and the ledger entries.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/ops/autocast.h"
#include "engine/optim/loss_scaler.h"
#include "tools/lib/train_config.h"

namespace kiln {

class AmpTraining {
 public:
  AmpTraining(const TrainConfig& c, Device device);

  bool enabled() const { return enabled_; }
  // Autocast on for its lifetime under --amp (off otherwise): wrap the forward pass and the loss.
  std::unique_ptr<AutocastGuard> region() const;
  // (loss * scale).backward() under --amp; loss.backward() otherwise.
  void backward(const Tensor& loss);
  // Unscales the gradients (call before clipping; a no-op without --amp).
  void unscale(const std::vector<Tensor>& params);
  // Runs optimizer_step unless the gradients hold an inf/NaN (then the step is skipped), and
  // updates the scale. Returns whether the step ran.
  bool step(const std::vector<Tensor>& params, const std::function<void()>& optimizer_step);

  // The scaler's state for training checkpoints, and its restore (--resume).
  const optim::LossScaler& scaler() const { return scaler_; }
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
