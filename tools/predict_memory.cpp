// `kiln predict`'s memory lines (see predict_memory.h).
#include "tools/predict_memory.h"

#include "engine/memory/alloc_config.h"
#include "engine/run/alloc_options.h"
#include "engine/run/mem_predict.h"

namespace kiln {

RunPlan plan_predict_memory(const PredictConfig& c, const PredictModelSpec& spec, const DataSource& data,
                            const PredictPassOptions& o, Device device, std::ostream& log) {
  AllocOptions ao;
  ao.device_memory = c.device_memory;
  apply_device_memory(ao, device, log);
  PredictPlanInputs in;
  in.model = spec;
  in.data = &data;
  in.pass = o;
  in.device = device;
  in.budget = device_budget(device);
  const RunPlan plan = plan_predict(in);
  log << predict_plan_text(plan);
  if (!plan.fits() && !c.dry_run)
    log << "memory: the plan does not fit the budget of " << format_bytes((double)plan.budget)
        << (c.device_memory.empty() ? " (the device's memory)" : " (--device-memory " + c.device_memory + ")")
        << "; predicting anyway (a smaller --batch needs less)\n";
  return plan;
}

PredictResult dry_run_result(const RunPlan& plan, std::ostream& log) {
  log << "predict --dry-run: the plan only; nothing written\n";
  PredictResult r;
  note_predict_plan(plan, r);
  return r;
}

void note_predict_plan(const RunPlan& plan, PredictResult& r) {
  r.plan_fits = plan.fits();
  r.planned_allocated = plan.peak_allocated;
  r.planned_reserved = plan.peak_reserved;
}

void report_predict_memory(const RunPeaks& peaks, const RunPlan& plan, PredictResult& r, std::ostream& log) {
  note_predict_plan(plan, r);
  r.measured_allocated = peaks.allocated();
  r.measured_reserved = peaks.reserved();
  log << measured_vs_planned_line(r.measured_allocated, r.measured_reserved, plan) << "\n";
}

}  // namespace kiln
