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

}  // namespace kiln_cli
