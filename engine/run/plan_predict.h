// The memory plan of `kiln predict`, made by replaying it on the meta device: the same model construction
// from the weights (build_predict_model: the host scratch, then the copy to the device), the same pass
// (predict_pass: batch size, image size and channels, the forward under NoGradGuard in eval mode, the
// per-batch temporary scope, the outputs and the segmentation's confusion matrix) over the data's meta twin
// (data/meta_source.h: its full batches and its short last batch, handed over as the real source hands them),
// through a fresh caching allocator with the device's policy whose provider has the budget as its capacity.
// Batches are replayed until the allocator's block map repeats (then only the short last batch is). On the
// CPU the plan's peak allocated and reserved bytes are the prediction's, to the byte (measured from the
// model's copy to the device to the end of the pass: RunPeaks). The host copies of the outputs, the CSV and
// the PNGs are outside the device's allocator on a GPU and outside the figures. Must not touch real data
// or the device's memory; restores the global generator.
#pragma once
#include <cstdint>

#include "data/data_source.h"
#include "engine/run/predict_pass.h"
#include "engine/run/run_plan.h"

namespace kiln {

struct PredictPlanInputs {
  PredictModelSpec model;
  const DataSource* data = nullptr;
  PredictPassOptions pass;
  Device device = Device::cpu();  // the device planned for
  int64_t budget = 0;             // its memory (bytes): the replay's capacity
};

// Phases: "set-up" (the model on the device), "batches: batch B x S px", "short last batch: batch b x S px".
RunPlan plan_predict(const PredictPlanInputs& in);

// The plan in words: a header ("memory plan (cpu, the prediction replayed on the meta device: 3 batches):"),
// one line per phase, the whole run against the budget (RunPlan::text's lines).
std::string predict_plan_text(const RunPlan& plan);

}  // namespace kiln
