// The micro-batches of one training step and who runs what: which rows form each micro-batch, which are
// left out (their loss is undefined by construction: every target ignored or of class weight 0), and the
// rows the loss is averaged over. One process plans alone (plan_step); a data-parallel rank then completes
// the plan over all ranks (DataParallel::plan_step: one small all-reduce), so every rank weights its
// losses alike, keys its random rows by their place in the global micro-batch, and, with --sync-bn, runs
// every micro-batch that some rank runs. train::train_step follows the plan. Must not run the model.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/autograd/grad_hook.h"
#include "engine/core/rng_rows.h"
#include "engine/train/batch.h"

namespace kiln::train {

struct MicroRange {
  int64_t offset = 0, size = 0;  // rows [offset, offset + size) of the step's batch
  bool left_out = false;         // loss undefined by construction
  bool runs() const { return size > 0 && !left_out; }
};

struct StepPlan {
  std::vector<MicroRange> micro;  // this process's micro-batches, in order
  int64_t samples = 0;            // rows of the step's batch (data-parallel: over all ranks)
  int64_t used = 0;               // rows not left out (over all ranks): the loss is their mean
  int64_t undefined_micro_batches = 0;  // micro-batches with rows and no loss anywhere
  // Data-parallel (DataParallel::plan_step); one process: empty.
  int ranks = 1, rank = 0;
  std::vector<int64_t> rows_of;   // rows of micro-batch k on rank q: rows_of[k * ranks + q]
  std::vector<int64_t> live;      // ranks that run micro-batch k with a loss
  bool join_all = false;          // --sync-bn: run every micro-batch some rank runs (weight 0 where no loss)
  bool same_forwards = true;      // every rank runs the same micro-batches
  GradAccumulatedHook last_backward_hook;  // installed around the last backward this rank runs (buckets)

  int64_t size() const { return (int64_t)micro.size(); }
  // This rank runs a forward and backward for micro-batch k; with a loss, or to join the reductions.
  bool runs_here(int64_t k) const { return join_all ? live[(size_t)k] > 0 : micro[(size_t)k].runs(); }
  bool has_loss(int64_t k) const { return micro[(size_t)k].runs(); }
  int64_t last_run() const;  // the last micro-batch this rank runs (-1: none)
  // The random rows of micro-batch k: its place in the global micro-batch (total < 0 with one process).
  RngRows keyed_rows(int64_t k) const;
};

// One process's plan of `batch` in `accum` micro-batches (batch.micro_rows when given; padded to accum
// entries with empty ones when pad_to_accum, as every data-parallel rank must have the same count).
// loss_undefined (optional) marks the left-out ones; not on the meta device (no values to read).
StepPlan plan_step(const Batch& batch, int64_t accum, bool pad_to_accum,
                   const std::function<bool(const Tensor& y)>& loss_undefined, bool meta);

}  // namespace kiln::train
