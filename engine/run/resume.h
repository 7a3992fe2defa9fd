// --resume as two steps of a run: before anything is planned or built, the training-state file is read
// and compared with the run's options (engine/run/resume_check.h: a difference is refused unless
// resume_override); after the model and optimizer exist, its tensors, generator and position are
// restored and the run learns where to start (epoch, optimizer step, step within the epoch and the
// interrupted epoch's sums, so the finished run gives the bytes of an uninterrupted one).
// Must not train or write files.
#pragma once
#include <cstdint>
#include <optional>
#include <ostream>

#include "engine/run/run_config.h"
#include "engine/train/fit.h"
#include "engine/train/train_state.h"

namespace kiln {

// What a resumed run found in its state file, before the model exists.
struct ResumeState {
  std::optional<CheckpointFile> file;  // empty: no --resume
  bool load_optimizer = true;          // false: the saved optimizer state does not fit the new optimizer
  bool restart_epoch = false;          // the interrupted epoch's batches changed: it starts over
  // Where the run will start: the state's epochs done and steps of the next (0 when that epoch starts over).
  int64_t epoch() const { return file ? file->state.epoch : 0; }
  int64_t step_in_epoch() const { return file && !restart_epoch ? file->state.step_in_epoch : 0; }
};

// Reads c.resume (when set) and checks it against c and num_classes; notes go to log.
ResumeState read_resume_state(const RunConfig& c, int64_t num_classes, std::ostream& log);

// Where the run starts, and the saved loss scaler state.
struct ResumePoint {
  int64_t epoch = 0, step = 0, step_in_epoch = 0;
  train::EpochSums sums;
  CheckpointState saved;  // has_amp, amp_scale, ... (defaults without --resume)
};

// Loads the state's tensors into model (and opt, when they fit), the global generator, and the position
// (checked against c.epochs and steps_per_epoch); frees the file's host copy. No --resume: the start.
ResumePoint restore_resume_state(ResumeState& r, const RunConfig& c, nn::Module& model, optim::Optimizer& opt,
                                 Device device, int64_t steps_per_epoch, std::ostream& log);

}  // namespace kiln
