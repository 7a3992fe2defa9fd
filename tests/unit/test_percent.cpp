// One percentage rule (issue 34, item 5): 100 * count / total from the integer counts, rounded half away
// from zero to two decimals, for the epoch line, `kiln runs` (and so the report's table), `kiln predict`
// and the segmentation lines. 11 of 12 is 91.67% everywhere, never the truncated 91.66%.
#include <doctest/doctest.h>

#include <fstream>
#include <algorithm>

#include "engine/core/percent.h"
#include "support/cli/image_folder.h"
#include "support/cli/run_kiln.h"
#include "tools/epoch_line.h"
#include "tools/runs_table.h"

using kiln_test::contains;
using kiln_test::run_kiln;

TEST_CASE("percent: from counts, half away from zero, two decimals") {
  CHECK(kiln::percent_text(11, 12) == "91.67%");
  CHECK(kiln::percent_text(2, 3) == "66.67%");
  CHECK(kiln::percent_text(1, 800) == "0.13%");  // 0.125: half away from zero (printf's %.2f gives 0.12)
  CHECK(kiln::percent_text(1, 1600) == "0.06%");  // 0.0625
  CHECK(kiln::percent_text(12, 12) == "100.00%");
  CHECK(kiln::percent_text(0, 12) == "0.00%");
  CHECK(kiln::percent_text(1, 0) == "-");
  CHECK(kiln::percent_hundredths(-1, 800) == -13);
  CHECK(kiln::percent_text(0.00125) == "0.13%");
  CHECK(kiln::percent_text(11.0 / 12.0) == "91.67%");
}

TEST_CASE("percent: the epoch line and kiln runs write 11 of 12 as 91.67%") {
  kiln::train::EpochStats es;
  es.epoch = 1;
  es.train_loss = 0.5;
  es.train_acc = 7.0 / 12.0;
  es.train_correct = 7, es.train_total = 12;
  es.val_loss = 0.25;
  es.val_acc = 11.0 / 12.0;
  es.val_correct = 11, es.val_total = 12;
  const std::string line = kiln_cli::format_epoch_line(es, 2, false);
  CAPTURE(line);
  CHECK(contains(line, "train loss 0.5000 acc 58.33%"));
  CHECK(contains(line, "val loss 0.2500 acc 91.67%"));

  kiln::train::LedgerRun run;
  run.start = {{"type", "start"}, {"config", {{"model", "small_cnn"}, {"epochs", 1}}}};
  run.epochs.push_back({{"epoch", 1}, {"val_acc", 11.0 / 12.0}, {"val_correct", 11}, {"val_total", 12}});
  const nlohmann::json row = kiln_cli::run_row(run);
  const std::vector<std::string> cells = kiln_cli::table_cells(row);
  CHECK(std::find(cells.begin(), cells.end(), "91.67%") != cells.end());
}

TEST_CASE("percent: a run's epoch line, its ledger counts, kiln runs and kiln predict give one number") {
  const std::string d = kiln_test::cli_temp_dir("percent_cli");
  kiln_test::make_image_folder(d + "/set", 3, 6, 16, 1, false);  // val: 3 classes x 3 = 9 images
  const kiln_test::CliRun t = run_kiln("train --model small_cnn --data " + d + "/set --channels 1 --epochs 1 --batch 6 "
                                       "--lr 0.02 --threads 1 --out " + d + "/out --save " + d + "/w.safetensors");
  REQUIRE_MESSAGE(t.status == 0, t.output);
  const nlohmann::json end = kiln_test::last_ledger_line(d + "/out/runs.jsonl");
  REQUIRE(end["epochs"].size() == 1);
  const nlohmann::json& e = end["epochs"][0];
  REQUIRE(e["val_total"] == 9);
  REQUIRE(e["train_total"] == 18);
  const std::string val = kiln::percent_text(e["val_correct"].get<int64_t>(), 9);
  const std::string train = kiln::percent_text(e["train_correct"].get<int64_t>(), 18);
  CAPTURE(t.output);
  CHECK(contains(t.output, "acc " + train + "  val loss "));
  CHECK(contains(t.output, " acc " + val + "  "));
  const kiln_test::CliRun r = run_kiln("runs " + d + "/out");
  CAPTURE(r.output);
  CHECK(contains(r.output, " " + val + " "));
  const kiln_test::CliRun p = run_kiln("predict --weights " + d + "/w.safetensors --data " + d + "/set --out " + d + "/p.csv");
  CAPTURE(p.output);
  CHECK(contains(p.output, "; accuracy " + val + "\n"));
}
