// A run's memory plan, made by replaying the run on the meta device: the same set-up (engine/run/
// run_setup.h), then train::fit, train_step and the evaluation over the sources' meta twins
// (data/meta_source.h), through a fresh caching allocator with the device's policy whose provider has the
// run's memory budget as its capacity (engine/train/meta_session.h). Every allocation the run makes on its
// device is made here in the same order, so on the CPU the plan's peak allocated and reserved bytes are the
// run's, to the byte. Each phase is replayed until the allocator's block map repeats: the steps of an epoch
// until the map at a step's start equals the one a step earlier (the rest of the epoch's batches of that
// shape then repeat; its short last batch is replayed), the epochs until the map at an epoch's end equals
// the one an epoch earlier (the epochs up to the next image size then repeat). An out-of-memory in the
// replay names the phase and step where the run would run out. Must not touch real data or the device's
// memory; restores the global generator.
#pragma once
#include <cstdint>

#include "data/data_source.h"
#include "engine/run/run_config.h"
#include "engine/run/run_plan.h"
#include "engine/run/run_setup.h"

namespace kiln {

struct PlanInputs {
  const RunConfig* config = nullptr;   // c.ranks: data-parallel ranks (the plan is rank 0's)
  const DataSource* train = nullptr;
  const DataSource* val = nullptr;      // optional
  ModelShape model;
  Device device = Device::cpu();        // the device planned for
  int64_t budget = 0;                   // its memory (bytes): the replay's capacity
  // A resumed run starts here: epochs done, and steps of the next (its first batches are skipped).
  int64_t start_epoch = 0, start_step_in_epoch = 0;
  // > 0: every batch at this image size (a plan of a smaller --image-size remedy; image data only).
  int64_t image_size = 0;
};

RunPlan plan_run(const PlanInputs& in);

}  // namespace kiln
