// The runs table of `kiln runs` and `kiln report`: one row a run read from ledgers
// (engine/train/run_ledger.h), as flat JSON (the keys --sort and --where name), filtered, sorted,
// and printed as a text table, CSV or JSON. Must not train or write files.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/train/run_ledger.h"

namespace kiln_cli {

// The row keys in table order: when run status model data image_size batch accum optimizer lr amp amp_dtype
// (f16 or bf16 under --amp; null without, and f16 for ledgers written before bf16) recompute epochs epochs_planned train_acc val_acc val_correct val_total (the best epoch's counts) time_s images_per_s predicted_peak
// measured_peak last_step error file. Missing values are null.
const std::vector<std::string>& run_row_keys();
nlohmann::json run_row(const kiln::train::LedgerRun& run);

// Ledgers named by paths: a folder means FOLDER/runs.jsonl. Warnings (torn lines) go to `warnings`.
std::vector<kiln::train::LedgerRun> read_runs(const std::vector<std::string>& paths,
                                              std::vector<std::string>& warnings);

// --where KEY=VALUE (also != < <= > >=; numbers compare as numbers); throws kiln::Error naming an
// unknown key or a malformed filter.
bool row_matches(const nlohmann::json& row, const std::string& filter);
// Stable sort by a key (ascending; descending = true reverses); nulls last either way.
void sort_rows(std::vector<nlohmann::json>& rows, const std::string& key, bool descending);

void print_runs_table(const std::vector<nlohmann::json>& rows, std::ostream& out);
void print_runs_csv(const std::vector<nlohmann::json>& rows, std::ostream& out);

// The text table's headers and one row's cells (kiln report's HTML table uses the same).
const std::vector<std::string>& table_headers();
std::vector<std::string> table_cells(const nlohmann::json& row);

// "12.3 MiB", "-" for null.
std::string format_mib(const nlohmann::json& bytes);

}  // namespace kiln_cli
