// <kiln/memory.h>: where memory goes: the caching allocator's stats and tags (MemoryScope), the measured
// peaks of a device, and the prediction of a training step on the meta device (shapes only, no arithmetic).
// Intended usage:
//   kiln::StepMemory m = kiln::train::predict_step_memory(make_model, make_optimizer, options);
//   m.peak_allocated, m.peak_reserved, m.layer_activations      // bytes, before any real step
//   kiln::caching_allocator_for(kiln::Device::cpu())->stats()   // what a real step held
// Declares nothing itself.
#pragma once

#include "train.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/stats.h"
#include "engine/memory/tag.h"
#include "engine/train/memory_peak.h"
#include "engine/train/memory_predict.h"
#include "engine/train/memory_watch.h"
