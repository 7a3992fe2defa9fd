// The training report: one self-contained HTML page (inline CSS, SVG drawn here and a few lines of
// JS for hovering; nothing fetched from the network) with the curves of one or several runs
// overlaid (loss per curve point and per epoch, accuracy, learning rate, loss scale and skipped
// steps, images/s), each run's memory-by-tag timeline, and the runs table. Written by
// `kiln report` and `kiln train --report`. Must not train: it draws what the ledgers hold.
#pragma once
#include <string>
#include <vector>

#include "engine/train/run_ledger.h"

namespace kiln_cli {

std::string render_run_report(const std::vector<kiln::train::LedgerRun>& runs, const std::string& title);
// Writes the page atomically; throws kiln::Error naming the path on failure.
void write_run_report(const std::string& path, const std::vector<kiln::train::LedgerRun>& runs,
                      const std::string& title);

}  // namespace kiln_cli
