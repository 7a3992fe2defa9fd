// <kiln/run.h>: a whole training run as one object, what the `kiln train` command does: from a RunConfig,
// data, model, optimizer, the memory plan, resume, checkpoints, data-parallel ranks and the run ledger.
// Intended usage:
//   kiln::RunConfig c;  c.model = "resnet18_small";  c.data = "FOLDER";  c.out = "runs/x";
//   c.amp = true;  c.amp_dtype = kiln::DType::bf16;   // optional: `--amp bf16` (bf16 autocast, no loss scaler;
//                                                      // DType::f16, the default: `--amp`, with loss scaling)
//   kiln::Run run(c, {&std::cout});     // prepares; refuses what would fail (flags, data, memory)
//   std::cout << run.plan().text();     // the memory plan
//   kiln::RunResult r = run.train();    // trains
// Declares nothing itself (engine/run/run.h does; its header says what a run does, step by step).
#pragma once

#include "memory.h"
#include "engine/run/run.h"
