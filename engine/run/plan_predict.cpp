// The memory plan of `kiln predict` by replay (see plan_predict.h).
#include "engine/run/plan_predict.h"

#include <algorithm>

#include "data/meta_source.h"
#include "engine/core/error.h"
#include "engine/core/generator.h"
#include "engine/core/meta_target.h"
#include "engine/memory/alloc_config.h"
#include "engine/train/meta_session.h"

namespace kiln {

namespace {

// Folds the phase now running (its peaks since begin_step) into the plan.
void fold_phase(train::MetaSession& session, RunPlan& plan, const PhasePlan& phase) {
  const StepPeak p = session.end_step();
  auto it = std::find_if(plan.phases.begin(), plan.phases.end(), [&](const PhasePlan& q) { return q.name == phase.name; });
  if (it == plan.phases.end()) {
    plan.phases.push_back(phase);
    it = plan.phases.end() - 1;
  }
  it->peak_allocated = std::max(it->peak_allocated, p.allocated);
  it->peak_reserved = std::max(it->peak_reserved, p.reserved);
  plan.peak_allocated = std::max(plan.peak_allocated, p.allocated);
  plan.peak_reserved = std::max(plan.peak_reserved, p.reserved);
}

}  // namespace

RunPlan plan_predict(const PredictPlanInputs& in) {
  RunPlan plan;
  plan.device = in.device.str();
  plan.budget = in.budget;
  plan.planned = true;
  plan.epochs_replayed = 1;
  bool assumed = false;
  const AllocatorConfig cfg = train::meta_policy_for(in.device, &assumed);
  MetaTargetScope imitate(in.device.is_meta() ? Device::cpu() : in.device);
  const RngState rng_before = global_rng();
  std::string where = "set-up (the model's parameters and buffers on the device)";
  {
    train::MetaSession session(cfg, (size_t)std::max<int64_t>(in.budget, 0));
    PhasePlan current{"set-up", 0, in.model.image_size, 0, 0};
    bool running = true;
    try {
      session.begin_step();
      nn::ModulePtr model = build_predict_model(in.model, nullptr, Device::meta());
      fold_phase(session, plan, current);
      running = false;

      MetaSource data(*in.data);
      data.set_repeat_check([&session] { return session.layout_digest(); });
      // Each batch's phase runs from the end of the batch before (its outputs freed, this batch handed over)
      // to its outputs (after the forward's peak); a segmentation with masks keeps its confusion matrix.
      int64_t index = 0;
      const int64_t size = in.data->image_size(0);
      Tensor counts;
      const int64_t batches = (int64_t)in.data->epoch_batches(0, in.pass.batch, false).size();
      where = str_cat("batch 1 of ", batches);
      session.begin_step();
      running = true;
      current = {"batches", in.pass.batch, size, 0, 0};
      predict_pass(*model, data, in.pass, &counts, [&](const SourceBatch& b, const PredictBatchOutput&) {
        const int64_t rows = b.x.size(0);
        current.name = str_cat(data.at_short_last() ? "short last batch" : "batches", ": batch ", rows, " x ", size, " px");
        current.batch = rows;
        fold_phase(session, plan, current);
        session.begin_step();
        ++index;
        where = str_cat("batch ", index + 1, " of ", batches);
      });
      running = false;
      plan.steps_replayed = index;
      if (data.skipped() > 0)
        plan.notes.push_back(str_cat("the block map repeats from batch ", index - (data.at_short_last() ? 1 : 0), "; ",
                                     data.skipped(), " batches of the same shape not replayed"));
    } catch (const OutOfMemory& e) {
      if (running) fold_phase(session, plan, current);
      plan.oom_where = where;
      plan.oom_message = e.what();
    } catch (const Error& e) {
      global_rng() = rng_before;
      throw Error(str_cat("predict's plan (the prediction replayed on the meta device) fails at ", where, ": ", e.what()));
    }
  }
  global_rng() = rng_before;
  if (!plan.oom_where.empty()) plan.notes.push_back("out of memory in the replay at " + plan.oom_where);
  plan.notes.push_back("not in these figures: what predict holds outside kiln's allocator (the loader's host batch "
                       "buffers, the outputs' host copies, the CSV or PNGs; OpenBLAS, decoders, thread stacks)");
  if (!in.device.is_cpu() && !in.device.is_meta())
    plan.notes.push_back("on " + in.device.str() + " the replay is of kiln's own allocations; cuDNN's and cuBLAS's "
                         "workspaces and the CUDA context are not in it (the predict plan is checked on the CPU only)");
  if (assumed) plan.notes.push_back("the allocator policy of " + in.device.str() + " is assumed (no such device here)");
  return plan;
}

std::string predict_plan_text(const RunPlan& plan) {
  std::string t = plan.text();
  if (!plan.planned) return t;
  const size_t eol = t.find('\n');
  return "memory plan (" + plan.device + ", the prediction replayed on the meta device: " +
         std::to_string(plan.steps_replayed) + " batches):" + t.substr(eol);
}

}  // namespace kiln
