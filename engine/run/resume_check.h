// --resume against the flags of the resuming run: which settings differ from those the training
// state was saved with (the optimizer and its hyper-parameters, batch, accumulation, data, --limit,
// data options, seed), one "NAME: saved X, now Y" line each. Not compared: what does not change the
// trained weights (--epochs under a schedule that ignores the run's length, --val, --threads,
// --device, output paths, --recompute, the batches' layout --[no-]channels-last: the same math in another
// rounding order, resolved again by the resuming run from its own flags and device) and --amp, which a run
// may switch on or off when resuming (the loss scaler then starts from its initial scale, with a note). The amp dtype does compare when both
// runs use --amp: an f16 state (loss scaled) resumed as --amp bf16, or the reverse, is one line
// "amp: saved --amp f16, now --amp bf16" (a state without "amp_dtype" is f16). The batch compares as the global
// batch, --batch x ranks (data-parallel: "batch: saved 8 x 2 ranks, now 8"), so a state resumes with
// another rank count when the global batch is kept. Must not load tensors or touch files.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/run/run_config.h"

namespace kiln {

// `saved`: RunConfig::to_json() of the run that wrote the state (null: nothing to compare).
std::vector<std::string> resume_differences(const nlohmann::json& saved, const RunConfig& now);

// True when a training state saved with `saved` can be loaded into the optimizer `now` builds
// (same optimizer, and for SGD momentum on in both or off in both: the state holds exactly the
// tensors the new optimizer keeps, so the memory prediction covers what resume loads).
bool optimizer_state_compatible(const nlohmann::json& saved, const RunConfig& now);

}  // namespace kiln
