// What a run trains with, built in one fixed order by the run itself (engine/run/run.cpp) and by its
// memory plan on the meta device (engine/run/run_plan_replay.cpp), so the two make the same allocations:
//   1. the model and its optimizer with every state tensor, built and given their values (--init, a
//      --resume state) in the host scratch (engine/memory/host_scratch.h), then copied into the device's
//      allocator: parameters and buffers in registration order, then the optimizer state;
//   2. data-parallel gradient buckets (a real process group, or ranks in imitation for the plan);
//   3. the class-weight tensor;
//   4. the loss scaler (amp);
// and the fit options every run trains with (step options, the LR function, segmentation's loss and
// evaluation); a run adds its callbacks (ledger, checkpoints, progress), a plan its own (phases).
// Must not print, write files or read data.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "engine/dist/process_group.h"
#include "engine/nn/module.h"
#include "engine/optim/optimizer.h"
#include "engine/run/amp_training.h"
#include "engine/run/run_config.h"
#include "engine/train/data_parallel.h"
#include "engine/train/fit.h"

namespace kiln {

struct RunSetup {
  nn::ModulePtr model;
  std::unique_ptr<optim::Optimizer> opt;
  Tensor class_weights;                            // (K) f32 on the device, or undefined
  std::unique_ptr<dist::ProcessGroup> imitated;    // a plan's ranks in imitation
  std::unique_ptr<train::DataParallel> data_parallel;
  std::unique_ptr<AmpTraining> amp;
};

struct ModelShape {
  int64_t num_classes = 0, channels = 0, image_size = 0;
  int recompute_segments = 0;
};

// Step 1. `load` (optional) gives the model and optimizer their values while they are still in the scratch
// (after the model's own initialization and the optimizer's zero state); without it (a plan) the model is
// built for its shapes only (no random draws).
void build_model_and_optimizer(RunSetup& s, const RunConfig& c, const ModelShape& shape, Device device,
                               const std::function<void(nn::Module&, optim::Optimizer&)>& load = {});
// Step 2 (more than one rank): buckets over `group` (null: ranks in imitation, rank 0 of c.ranks).
void make_data_parallel(RunSetup& s, const RunConfig& c, dist::ProcessGroup* group);
// Step 3.
void make_class_weights(RunSetup& s, const RunConfig& c, int64_t num_classes, Device device);
// Step 4.
void make_loss_scaler(RunSetup& s, const RunConfig& c, Device device);

// The options of train::fit every run trains with (no callbacks).
train::FitOptions run_fit_options(const RunConfig& c, const RunSetup& s);

}  // namespace kiln
