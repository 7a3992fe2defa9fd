// `kiln train` (see train_command.h).
#include "tools/train_command.h"

#include <memory>

#include <nlohmann/json.hpp>

#include "engine/dist/process_group.h"
#include "tools/epoch_line.h"
#include "tools/progress.h"
#include "tools/report/memory_report.h"
#include "tools/test_faults.h"

namespace kiln_cli {

kiln::RunResult run_train_command(const kiln::RunConfig& c, std::ostream& log, std::ostream& progress,
                                  bool progress_tty, const kiln::LedgerHook& on_ledger) {
  const bool segment = c.task == "segment";
  const int rank = kiln::dist::world().rank();
  auto bar = std::make_shared<std::unique_ptr<kiln::ProgressLine>>();
  const TestFaults faults;
  kiln::RunOptions o;
  o.log = &log;
  o.events.on_epoch_begin = [&, bar](int64_t epoch, int64_t epochs, int64_t steps) {
    *bar = std::make_unique<kiln::ProgressLine>(progress, progress_tty, epoch, epochs, steps);
  };
  o.events.before_step = [&faults, rank](const kiln::train::FitStep& fs) { faults.before_step(rank, fs.global_step); };
  o.events.on_step_end = [bar](const kiln::StepProgress& p) {
    (*bar)->set_suffix(p.status);
    (*bar)->update(p.step->step_in_epoch + 1, p.step->mean_loss, p.step->seen);
    if (p.first) (*bar)->finish();  // the first step's memory notes follow on their own lines
  };
  o.events.on_epoch_end = [&, bar, segment](const kiln::EpochStats& es) {
    (*bar)->finish();
    log << format_epoch_line(es, c.epochs, segment) << std::endl;
  };
  if (!c.memory_report.empty())
    o.events.on_first_step_memory = [&](const kiln::MemPrediction& p, const kiln::MemMeasured& m) {
      kiln::write_memory_report(c.memory_report, p, m);
      log << "memory report: " << c.memory_report << "\n";
    };
  o.events.on_ledger = on_ledger;
  kiln::Run run(c, std::move(o));
  return run.train();
}

int run_plan_command(const kiln::RunConfig& c, bool json, std::ostream& out, std::ostream& log) {
  kiln::RunOptions o;
  o.plan_only = true;
  o.log = json ? nullptr : &log;  // the notes (data, model, warnings) only with the text form
  kiln::Run run(c, std::move(o));
  const kiln::RunPlan& plan = run.plan();
  if (json) {
    nlohmann::json j = plan.to_json();
    if (!plan.fits()) j["refusal"] = run.plan_refusal();
    out << j.dump(2) << "\n";
  } else if (!plan.fits()) {
    out << run.plan_refusal() << "\n";
  } else {
    out << "dry run: the plan fits; nothing was trained\n";
  }
  return plan.fits() ? 0 : 1;
}

}  // namespace kiln_cli
