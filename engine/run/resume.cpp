// Reading and restoring a --resume training state (see resume.h).
#include "engine/run/resume.h"

#include "engine/core/generator.h"
#include "engine/run/resume_check.h"

namespace kiln {

ResumeState read_resume_state(const RunConfig& c, int64_t num_classes, std::ostream& log) {
  ResumeState r;
  if (c.resume.empty()) return r;
  r.file = read_checkpoint(c.resume, c.model, num_classes);
  const std::vector<std::string> diffs = resume_differences(r.file->config, c);
  if (!diffs.empty() && !c.resume_override) {
    std::string list;
    for (const std::string& d : diffs) list += (list.empty() ? "" : "; ") + d;
    throw Error(str_cat("--resume: ", c.resume, " was saved with other settings: ", list,
                        " (pass the saved values, or --resume-override to train on with the new ones)"));
  }
  for (const std::string& d : diffs) log << "resume: --resume-override: " << d << "\n";
  r.load_optimizer = optimizer_state_compatible(r.file->config, c);
  if (!r.load_optimizer)
    log << "resume: --resume-override: the saved optimizer state does not fit --optimizer " << c.optimizer
        << (r.file->config.value("optimizer", "") == c.optimizer ? " (momentum on in one, off in the other)" : "")
        << "; it is not loaded, the optimizer starts fresh\n";
  // The interrupted epoch's batches depend on these; with new values the epoch starts over.
  for (const std::string& d : diffs)
    for (const char* key : {"batch:", "batch_memory:", "drop_last:", "limit:", "seed:", "data:"})
      if (d.rfind(key, 0) == 0) r.restart_epoch = true;
  return r;
}

ResumePoint restore_resume_state(ResumeState& r, const RunConfig& c, nn::Module& model, optim::Optimizer& opt,
                                 Device device, int64_t steps_per_epoch, std::ostream& log) {
  ResumePoint p;
  if (!r.file) return p;
  load_checkpoint_tensors(*r.file, model, r.load_optimizer ? &opt : nullptr, device);
  const CheckpointState st = p.saved = r.file->state;
  r.file.reset();  // the file's host copy is no longer needed
  p.epoch = st.epoch;
  p.step = st.step;
  global_rng() = st.rng;
  KILN_CHECK(p.epoch < c.epochs || (p.epoch == c.epochs && st.step_in_epoch == 0), "--resume: ", c.resume,
             " has already trained ", p.epoch, " epochs", st.step_in_epoch > 0 ? " and part of the next" : "",
             " but --epochs is ", c.epochs);
  if (st.step_in_epoch > 0 && r.restart_epoch) {
    log << "resume: --resume-override: epoch " << p.epoch + 1 << " starts over (its batches changed)\n";
  } else if (st.step_in_epoch > 0) {
    KILN_CHECK(st.step_in_epoch < steps_per_epoch, "--resume: ", c.resume, " was saved after step ",
               st.step_in_epoch, " of an epoch, but an epoch has ", steps_per_epoch, " steps");
    p.step_in_epoch = st.step_in_epoch;
    p.sums = {st.epoch_loss_sum, st.epoch_correct, st.epoch_seen, st.epoch_undefined_batches, st.epoch_metric_total};
  }
  log << "resume: " << c.resume << " at epoch " << p.epoch;
  if (p.step_in_epoch > 0) log << " + " << p.step_in_epoch << "/" << steps_per_epoch << " steps";
  log << ", step " << p.step << "\n";
  return p;
}

}  // namespace kiln
