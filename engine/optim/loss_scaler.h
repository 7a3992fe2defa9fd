// Dynamic loss scaling for f16 training, torch.cuda.amp.GradScaler's rule:
//   scale starts at init_scale (2^16); a step whose gradients hold an inf or NaN is skipped and
//   the scale multiplied by backoff_factor (0.5); after growth_interval (2000) consecutive clean
//   steps the scale is multiplied by growth_factor (2) — unless that would overflow f32.
// Use per step:  scaler.scale(loss).backward();
//                scaler.unscale_(params);   // optional; needed before gradient clipping
//                clip_grad_norm(params, ...);
//                scaler.step([&] { opt.step(); });   // or scaler.step(optimizer)
//                scaler.update();
// The state (scale, growth tracker, found_inf) lives in one-element f32 tensors on the
// parameters' device and is updated there with tensor ops; the host reads found_inf exactly once
// per step (in step(), or in update() when step() was not called) and keeps a mirror of the scale
// and the counters from it, so scale() and the counters cost no device synchronization.
// On the meta device (engine/train/memory_predict) it allocates and runs the same ops; found_inf reads
// as 0 there (no values), so every meta step is a clean one.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/tensor/tensor.h"

namespace kiln::optim {

class Optimizer;

struct LossScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;  // false: every call is a pass-through (scale 1, plain optimizer step)
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& o = {}, Device device = Device::cpu());

  // loss * scale (differentiable; loss must be floating, on the scaler's device). An f16 loss
  // first backs the scale off (backoff_factor, as a skipped step would) until it is at most 65504,
  // f16's largest value, so the scaled loss stays finite; no step is skipped for it.
  Tensor scale(const Tensor& loss);
  // Divides every defined gradient of `params` by the scale in place and records whether any
  // holds an inf or NaN (on the device, no synchronization). At most once per step; a second call
  // before update() is an error, like GradScaler's.
  void unscale_(const std::vector<Tensor>& params);
  void unscale_(Optimizer& opt);
  // Unscales (unless unscale_ ran this step), reads found_inf (the one host synchronization of
  // the step) and runs optimizer_step when every gradient is finite. Returns whether it ran.
  bool step(const std::vector<Tensor>& params, const std::function<void()>& optimizer_step);
  bool step(Optimizer& opt);
  // found_inf as the caller read it, after unscale_, in a host read it shares with other values
  // (train::train_step reads it with the step's loss sums): step() and update() then use it
  // instead of reading found_inf themselves. Counts as this step's read.
  void set_found_inf_read(bool found);
  // Backs off or grows the scale (on the device) and resets the per-step state. Call once per
  // step, after step().
  void update();

  bool enabled() const { return o_.enabled; }
  const LossScalerOptions& options() const { return o_; }
  double current_scale() const { return scale_host_; }      // host mirror of the device scale
  int64_t skipped_steps() const { return skipped_; }         // steps skipped on inf/NaN so far
  int64_t growth_tracker() const { return tracker_host_; }   // consecutive clean steps
  bool last_step_skipped() const { return last_skipped_; }
  int64_t host_syncs() const { return syncs_; }              // found_inf reads so far (tests)
  int64_t f16_backoffs() const { return f16_backoffs_; }     // scale() backed off for an f16 loss
  // Restores a saved state (training checkpoints): scale, consecutive clean steps and skipped
  // steps, on the device and in the host mirror. Throws kiln::Error for a non-positive or
  // non-finite scale or negative counters; a no-op when disabled.
  void load_state(double scale, int64_t growth_tracker, int64_t skipped_steps);
  // The device state (one-element f32 tensors), e.g. to check the mirror against.
  const Tensor& scale_tensor() const { return scale_; }
  const Tensor& growth_tracker_tensor() const { return tracker_; }
  const Tensor& found_inf_tensor() const { return found_inf_; }

 private:
  bool read_found_inf();  // once per step

  LossScalerOptions o_;
  Device device_;
  Tensor scale_, tracker_, found_inf_;  // device state
  double scale_host_ = 1.0;
  int64_t tracker_host_ = 0, skipped_ = 0, syncs_ = 0, f16_backoffs_ = 0;
  bool unscaled_ = false, found_read_ = false, found_host_ = false, last_skipped_ = false;
};

}  // namespace kiln::optim
