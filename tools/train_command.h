// `kiln train` as a function (tests call it in-process): the flags' RunConfig becomes a kiln::Run
// (engine/run/run.h) whose notes go to `log`, with the live progress line on `progress` (rewritten in
// place when progress_tty), the epoch lines, --memory-report's page after the first step, --report's page
// after each ledger record (on_ledger), and the tests' fault switches (tools/test_faults.h).
// Printing and flags only: what a run does is the library's.
#pragma once
#include <ostream>

#include "engine/run/run.h"

namespace kiln_cli {

kiln::RunResult run_train_command(const kiln::RunConfig& c, std::ostream& log, std::ostream& progress,
                                  bool progress_tty, const kiln::LedgerHook& on_ledger = {});

// `kiln train ... --dry-run [--json]`: the run prepared exactly as training would prepare it, its plan printed
// (each phase's predicted peak allocated and reserved, the whole run's, the budget, whether it fits, and the
// remedies when it does not), nothing trained, nothing written. With json: one JSON object whose top-level
// peak_allocated and peak_reserved are the whole run's (bytes). Returns the exit status: 0 fits, 1 does not.
int run_plan_command(const kiln::RunConfig& c, bool json, std::ostream& out, std::ostream& log);

}  // namespace kiln_cli
