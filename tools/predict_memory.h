// `kiln predict`'s memory answer around its pass: the plan (engine/run/plan_predict.h) made and printed
// before the model is built, and after the pass the measured whole-run peaks (engine/run/run_peaks.h) beside
// the plan's. Printing only; the plan is the library's.
#pragma once
#include <ostream>

#include "engine/run/plan_predict.h"
#include "engine/run/run_peaks.h"
#include "tools/predict.h"

namespace kiln {

// Applies --device-memory to `device`, plans the prediction against its budget and prints the plan.
RunPlan plan_predict_memory(const PredictConfig& c, const PredictModelSpec& spec, const DataSource& data,
                            const PredictPassOptions& o, Device device, std::ostream& log);

// The plan's figures into `r`.
void note_predict_plan(const RunPlan& plan, PredictResult& r);

// --dry-run: says that nothing was written and returns the result that carries the plan's figures.
PredictResult dry_run_result(const RunPlan& plan, std::ostream& log);

// After the pass: the measured peaks into `r`, and the line "memory: whole run: peak allocated X (planned Y,
// exact), peak reserved ...".
void report_predict_memory(const RunPeaks& peaks, const RunPlan& plan, PredictResult& r, std::ostream& log);

}  // namespace kiln
