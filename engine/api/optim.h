// <kiln/optim.h>: SGD and AdamW (PyTorch's semantics), learning-rate schedules, gradient clipping and
// the dynamic loss scaler of mixed precision.
// Intended usage:
//   kiln::optim::SGD opt(kiln::optim::make_param_groups(model.named_parameters(), 0.1, 5e-4), {0.9});
//   ... loss.backward(); opt.step(); model.zero_grad();
// Declares nothing itself.
#pragma once

#include "nn.h"
#include "engine/optim/adamw.h"
#include "engine/optim/clip_grad.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optim/sgd.h"
