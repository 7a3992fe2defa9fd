// <kiln/train.h>: the training layer under a Run: one optimizer step (train::train_step, the trainer's and
// the memory predictor's), the epoch loop (train::fit), evaluation, segmentation metrics, data-parallel
// gradient buckets, training-state and weights files with their model card.
// Intended usage (your own loop):
//   kiln::train::StepOptions so;  so.accum = 2;
//   kiln::train::StepResult r = kiln::train::train_step(model, opt, scaler, kiln::Batch{x, y}, so);
// or the loop: kiln::train::fit(model, opt, scaler, *data.train, data.val.get(), fit_options).
// Declares nothing itself.
#pragma once

#include "data.h"
#include "optim.h"
#include "engine/train/batch.h"
#include "engine/train/data_parallel.h"
#include "engine/train/evaluate.h"
#include "engine/train/fit.h"
#include "engine/train/model_card.h"
#include "engine/train/segment_metrics.h"
#include "engine/train/segment_task.h"
#include "engine/train/train_state.h"
#include "engine/train/train_step.h"
