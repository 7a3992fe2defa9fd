// The run ledger (engine/train/run_ledger.h) and `kiln runs`: records written and merged back by
// run id, a torn last line skipped (and the next append starting a fresh line), old ledgers
// without records, a start without an end listed as killed with its last step, failed runs with
// their error, the curve recorder's windows, and kiln runs' --sort, --where, --json and --csv on a
// ledger written here. One tiny real `kiln train` checks the records a run writes.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/train/run_ledger.h"
#include "support/cli/run_kiln.h"

using kiln_test::contains;
using kiln_test::run_kiln;
using nlohmann::json;
namespace train = kiln::train;

namespace {

std::string read_text(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_text(const std::string& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

// A ledger of four runs as kiln writes them, by hand: an old-format line (no records), a finished
// run with curve points, a killed run (start, one curve point, one epoch, no end; on another host,
// so it cannot be "running") and a failed one.
std::string sample_ledger() {
  auto cfg = [](const char* model, int batch, int accum, const char* opt, double lr, bool amp) {
    return json{{"model", model}, {"data", "/d/fmnist-jpeg/"}, {"batch", batch}, {"accum", accum},
                {"optimizer", opt}, {"lr", lr}, {"amp", amp}, {"checkpoint", "0"}, {"epochs", 3}};
  };
  auto epoch = [](int e, double val_acc) {
    return json{{"epoch", e}, {"train_loss", 1.0 / e}, {"train_acc", 0.5 + 0.1 * e}, {"val_loss", 1.2 / e},
                {"val_acc", val_acc}, {"images_per_s", 100.0 * e}, {"seconds", 2.0}, {"peak_memory_bytes", 1 << 20}};
  };
  std::string s;
  json old = {{"time", "2026-01-01T00:00:00Z"}, {"command", "train"}, {"config", cfg("resnet18", 32, 1, "sgd", 0.1, false)},
              {"steps", 30}, {"epochs", {epoch(1, 0.70), epoch(2, 0.81), epoch(3, 0.79)}}, {"wall_s", 9.5},
              {"images_per_s", 300.0}, {"peak_memory_bytes", 5 << 20}};
  s += old.dump() + "\n";
  const json mem = {{"predicted", {{"peak_allocated", 3 << 20}}}, {"checkpoint_segments", 0}};
  s += json{{"record", "start"}, {"run", "A"}, {"time", "2026-01-02T00:00:00Z"}, {"pid", 1}, {"host", "elsewhere"},
            {"config", cfg("small_cnn", 16, 2, "adamw", 0.001, true)}, {"image_size", 28}, {"memory", mem}}.dump() + "\n";
  s += json{{"record", "step"}, {"run", "A"}, {"step", 1}, {"epoch", 1}, {"loss", 2.3}, {"lr", 0.001}, {"ips", 50.0},
            {"mem", {{"param", 1000}, {"grad", 1000}}}}.dump() + "\n";
  s += json{{"record", "step"}, {"run", "A"}, {"step", 50}, {"epoch", 1}, {"loss", 0.9}, {"lr", 0.0009}, {"ips", 60.0}}
           .dump() + "\n";
  s += json{{"record", "epoch"}, {"run", "A"}, {"steps", 60}, {"stats", epoch(1, 0.90)}}.dump() + "\n";
  s += json{{"record", "start"}, {"run", "K"}, {"time", "2026-01-03T00:00:00Z"}, {"pid", 1}, {"host", "elsewhere"},
            {"config", cfg("small_cnn", 64, 1, "sgd", 0.05, false)}}.dump() + "\n";
  s += json{{"record", "end"}, {"run", "A"}, {"status", "ok"}, {"config", cfg("small_cnn", 16, 2, "adamw", 0.001, true)},
            {"steps", 60}, {"epochs", {epoch(1, 0.90)}}, {"wall_s", 4.0}, {"images_per_s", 100.0},
            {"peak_memory_bytes", 2 << 20}, {"memory", mem}, {"image_size", 28}}.dump() + "\n";
  s += json{{"record", "step"}, {"run", "K"}, {"step", 150}, {"epoch", 2}, {"loss", 0.5}, {"lr", 0.05}, {"ips", 80.0}}
           .dump() + "\n";
  s += json{{"record", "epoch"}, {"run", "K"}, {"steps", 100}, {"stats", epoch(1, 0.60)}}.dump() + "\n";
  s += json{{"record", "start"}, {"run", "F"}, {"time", "2026-01-04T00:00:00Z"}, {"pid", 1}, {"host", "elsewhere"},
            {"config", cfg("resnet18", 8, 1, "sgd", 10.0, false)}}.dump() + "\n";
  s += json{{"record", "end"}, {"run", "F"}, {"status", "failed"}, {"error", "train: loss became nan at epoch 1, step 3"},
            {"steps", 2}, {"epochs", json::array()}}.dump() + "\n";
  return s;
}

const train::LedgerRun* find(const train::LedgerContents& c, const std::string& id) {
  for (const auto& r : c.runs)
    if (r.id == id) return &r;
  return nullptr;
}

}  // namespace

TEST_CASE("run ledger: records merge by run id, old lines are runs, start without end is killed") {
  const train::LedgerContents c = train::parse_ledger(sample_ledger(), "runs.jsonl");
  CHECK(c.warnings.empty());
  REQUIRE(c.runs.size() == 4);
  CHECK(c.runs[0].status == "ok");  // the old-format line: a complete run, no curve
  CHECK(c.runs[0].curve.empty());
  CHECK(c.runs[0].epochs.size() == 3);
  CHECK(c.runs[0].config()["model"] == "resnet18");
  CHECK(c.runs[1].id == "A");  // in the order the runs started
  CHECK(c.runs[2].id == "K");
  const train::LedgerRun* a = find(c, "A");
  REQUIRE(a);
  CHECK(a->status == "ok");
  CHECK(a->curve.size() == 2);
  CHECK(a->epochs.size() == 1);
  CHECK(a->last_step == 60);
  const train::LedgerRun* k = find(c, "K");
  REQUIRE(k);
  CHECK(k->status == "killed");
  CHECK(k->end.is_null());
  CHECK(k->last_step == 150);  // its last curve point is past its last epoch record
  CHECK(k->epochs.size() == 1);
  const train::LedgerRun* f = find(c, "F");
  REQUIRE(f);
  CHECK(f->status == "failed");
  CHECK(f->error == "train: loss became nan at epoch 1, step 3");
}

TEST_CASE("run ledger: a torn last line is skipped with a warning, the next append starts a fresh line") {
  const std::string dir = kiln_test::cli_temp_dir("ledger_torn"), path = dir + "/runs.jsonl";
  const std::string full = sample_ledger();
  const std::string torn = full + R"({"record":"step","run":"K","step":200,"ep)";
  write_text(path, torn);
  train::LedgerContents c = train::read_ledger(path);
  REQUIRE(c.warnings.size() == 1);
  CHECK(contains(c.warnings[0], path + ":12: not a JSON object"));
  CHECK(c.runs.size() == 4);
  CHECK(find(c, "K")->last_step == 150);  // the torn point is not counted
  // A new run appended after the torn line is read back whole.
  train::RunLedger ledger(path);
  ledger.start({{"config", {{"model", "small_cnn"}}}});
  ledger.finish({{"steps", 7}}, "ok");
  c = train::read_ledger(path);
  CHECK(c.warnings.size() == 1);  // still only the torn line
  REQUIRE(c.runs.size() == 5);
  CHECK(c.runs.back().id == ledger.run_id());
  CHECK(c.runs.back().status == "ok");
  CHECK(c.runs.back().last_step == 7);
  CHECK(c.runs.back().start["config"]["model"] == "small_cnn");  // the start record was not glued to the torn line
  // A middle line that is not JSON is skipped the same way; the rest still loads.
  write_text(path, "garbage\n" + full);
  c = train::read_ledger(path);
  CHECK(c.warnings.size() == 1);
  CHECK(c.runs.size() == 4);
  CHECK_THROWS_WITH_AS(train::read_ledger(dir + "/missing.jsonl"), doctest::Contains("missing.jsonl"), kiln::Error);
}

TEST_CASE("run ledger: the writer's records, a live run is running, a failure keeps its error") {
  const std::string dir = kiln_test::cli_temp_dir("ledger_write"), path = dir + "/runs.jsonl";
  train::RunLedger ledger(path);
  ledger.start({{"config", {{"model", "small_cnn"}, {"epochs", 2}}}});
  ledger.step({{"step", 1}, {"loss", 2.0}});
  ledger.epoch({{"steps", 4}, {"stats", {{"epoch", 1}, {"train_loss", 1.5}}}});
  train::LedgerContents c = train::read_ledger(path);
  REQUIRE(c.runs.size() == 1);
  CHECK(c.runs[0].status == "running");  // its process (this test) is alive on this host
  CHECK(c.runs[0].start["pid"] == (int64_t)::getpid());
  ledger.finish({{"steps", 5}}, "failed", "out of memory on cpu:0");
  c = train::read_ledger(path);
  REQUIRE(c.runs.size() == 1);
  CHECK(c.runs[0].status == "failed");
  CHECK(c.runs[0].error == "out of memory on cpu:0");
  CHECK(c.runs[0].epochs.size() == 1);  // the end line has no epochs: the epoch records stay
  CHECK(c.runs[0].last_step == 5);
  CHECK_THROWS_AS(ledger.finish({}, "done"), kiln::Error);
  // Every line is one record of this run.
  std::istringstream in(read_text(path));
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    CHECK(json::parse(line)["run"] == ledger.run_id());
  }
  CHECK(lines == 4);
  train::RunLedger none("");  // no --out: nothing written, nothing thrown
  none.start({});
  none.finish({}, "ok");
}

TEST_CASE("run ledger: the curve recorder keeps a point every N steps with the window's mean loss") {
  train::CurveRecorder rec(3, kiln::Device::cpu(), true);
  std::vector<json> points;
  for (int64_t s = 0; s < 10; ++s) {
    train::StepResult r;
    r.samples = s == 9 ? 2 : 4;
    r.loss = (double)(s + 1);  // 1, 2, ..., 10
    r.stepped = s != 4;
    r.loss_scale = 1024;
    train::FitStep fs;
    fs.epoch = s / 5;
    fs.global_step = s;
    fs.lr = 0.1 * (double)(s + 1);
    fs.result = &r;
    if (auto p = rec.observe(fs)) points.push_back(*p);
  }
  REQUIRE(points.size() == 4);  // steps 1 (the first), 3, 6, 9
  CHECK(points[0]["step"] == 1);
  CHECK(points[0]["loss"].get<double>() == doctest::Approx(1.0));
  CHECK(points[1]["step"] == 3);
  CHECK(points[1]["loss"].get<double>() == doctest::Approx(2.5));  // steps 2 and 3
  CHECK(points[2]["step"] == 6);
  CHECK(points[2]["loss"].get<double>() == doctest::Approx(5.0));  // 4, 5, 6
  CHECK(points[2]["skipped"] == 1);                                 // step 5 was skipped
  CHECK(points[3]["skipped"] == 0);
  CHECK(points[3]["lr"].get<double>() == doctest::Approx(0.9));
  CHECK(points[3]["epoch"] == 2);
  CHECK(points[3]["scale"] == 1024.0);
  CHECK(points[3]["ips"].get<double>() > 0);
  CHECK(points[3].contains("mem"));  // the CPU allocator keeps per-tag statistics
  CHECK_THROWS_AS(train::CurveRecorder(0, kiln::Device::cpu(), false), kiln::Error);
}

TEST_CASE("kiln runs: one row a run, --sort, --where, --json and --csv") {
  const std::string dir = kiln_test::cli_temp_dir("runs_cmd"), path = dir + "/runs.jsonl";
  write_text(path, sample_ledger());
  auto r = run_kiln("runs " + dir + " --json");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  json rows = json::parse(r.output);
  REQUIRE(rows.size() == 4);
  CHECK(rows[1]["run"] == "A");
  CHECK(rows[1]["model"] == "small_cnn");
  CHECK(rows[1]["data"] == "fmnist-jpeg");
  CHECK(rows[1]["batch"] == 16);
  CHECK(rows[1]["accum"] == 2);
  CHECK(rows[1]["amp"] == true);
  CHECK(rows[1]["image_size"] == 28);
  CHECK(rows[1]["predicted_peak"] == 3 << 20);
  CHECK(rows[1]["measured_peak"] == 2 << 20);
  CHECK(rows[0]["val_acc"].get<double>() == doctest::Approx(0.81));  // best epoch, not the last
  CHECK(rows[0]["epochs"] == 3);
  CHECK(rows[2]["status"] == "killed");
  CHECK(rows[2]["last_step"] == 150);
  CHECK(rows[2]["time_s"].get<double>() == doctest::Approx(2.0));  // its epochs' seconds
  CHECK(rows[3]["status"] == "failed");
  CHECK(contains(rows[3]["error"].get<std::string>(), "loss became nan"));

  r = run_kiln("runs " + path + " --json --sort val_acc --desc");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  rows = json::parse(r.output);
  REQUIRE(rows.size() == 4);
  CHECK(rows[0]["run"] == "A");   // 0.90
  CHECK(rows[1]["val_acc"].get<double>() == doctest::Approx(0.81));
  CHECK(rows[2]["run"] == "K");   // 0.60
  CHECK(rows[3]["run"] == "F");   // no val accuracy: last
  r = run_kiln("runs " + path + " --json --sort val_acc");
  rows = json::parse(r.output);
  CHECK(rows[0]["run"] == "K");
  CHECK(rows[3]["run"] == "F");  // nulls last ascending too

  r = run_kiln("runs " + path + " --json --where model=small_cnn --where 'status!=killed'");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  rows = json::parse(r.output);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0]["run"] == "A");
  r = run_kiln("runs " + path + " --json --where 'batch>=16'");
  rows = json::parse(r.output);
  CHECK(rows.size() == 3);  // 32, 16, 64 (not 8)
  r = run_kiln("runs " + path + " --where colour=red");
  CHECK(r.status != 0);
  CHECK(contains(r.output, "kiln: error: runs --where: unknown key 'colour'"));

  r = run_kiln("runs " + path + " --csv --where model=resnet18");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  std::istringstream csv(r.output);
  std::string header, row1, row2, extra;
  std::getline(csv, header);
  std::getline(csv, row1);
  std::getline(csv, row2);
  CHECK(header.rfind("when,run,status,model,data,image_size,batch,accum,optimizer,lr,", 0) == 0);
  CHECK(contains(row1, ",ok,resnet18,fmnist-jpeg,"));
  CHECK(contains(row2, ",failed,resnet18,"));
  CHECK(contains(row2, "\"train: loss became nan at epoch 1, step 3\""));  // the comma is quoted
  CHECK_FALSE(std::getline(csv, extra));

  r = run_kiln("runs " + path);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(contains(r.output, "killed @150"));
  CHECK(contains(r.output, "16x2"));
  CHECK(contains(r.output, "adamw 0.001"));
  CHECK(contains(r.output, "90.00%"));
  CHECK(contains(r.output, "failed F: train: loss became nan"));
  r = run_kiln("runs " + dir + "/nowhere");
  CHECK(r.status != 0);
  CHECK(contains(r.output, "kiln: error: runs: no ledger at " + dir + "/nowhere"));
}

TEST_CASE("kiln train: start, curve, epoch and end records in runs.jsonl, read back by kiln runs") {
  const std::string dir = kiln_test::cli_temp_dir("ledger_train"), data = dir + "/data", out = dir + "/out";
  std::filesystem::create_directories(data);
  kiln_test::make_npy_folder(data, 12, 1, 8, 2);
  auto r = run_kiln("train --model small_cnn --data " + data + " --epochs 2 --batch 4 --optimizer sgd --lr 0.05 "
                    "--schedule cosine --threads 1 --device cpu --curve-every 2 --out " + out);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  std::vector<json> lines;
  {
    std::istringstream in(read_text(out + "/runs.jsonl"));
    std::string l;
    while (std::getline(in, l)) lines.push_back(json::parse(l));
  }
  // 3 steps an epoch, 6 in all: points at steps 1, 2, 4, 6.
  std::vector<std::string> kinds;
  for (const json& l : lines) kinds.push_back(l["record"].get<std::string>());
  CHECK(kinds == std::vector<std::string>{"start", "step", "step", "epoch", "step", "step", "epoch", "end"});
  CHECK(lines[0]["config"]["curve_every"] == 2);
  CHECK(lines[0]["image_size"] == 8);
  CHECK(lines[4]["step"] == 4);
  CHECK(lines[4]["epoch"] == 2);
  CHECK(lines[3]["stats"]["epoch"] == 1);
  CHECK(lines.back()["status"] == "ok");
  CHECK(lines.back()["steps"] == 6);
  for (const json& l : lines) CHECK(l["run"] == lines[0]["run"]);
  auto runs = run_kiln("runs " + out + " --json");
  REQUIRE_MESSAGE(runs.status == 0, runs.output);
  const json rows = json::parse(runs.output);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0]["status"] == "ok");
  CHECK(rows[0]["epochs"] == 2);
  CHECK(rows[0]["last_step"] == 6);
}

TEST_CASE("kiln train: a run that throws appends its end record with status failed and the error") {
  const std::string dir = kiln_test::cli_temp_dir("ledger_failed"), data = dir + "/data", out = dir + "/out";
  std::filesystem::create_directories(data);
  kiln_test::make_npy_folder(data, 12, 1, 8, 2);
  auto r = run_kiln("train --model small_cnn --data " + data + " --epochs 2 --batch 4 --optimizer sgd --lr 1e30 "
                    "--threads 1 --device cpu --out " + out);
  REQUIRE(r.status != 0);
  REQUIRE(contains(r.output, "kiln: error: train: non-finite loss"));
  const auto ends = kiln_test::ledger_end_records(out + "/runs.jsonl");
  REQUIRE(ends.size() == 1);
  CHECK(ends[0]["status"] == "failed");
  CHECK(contains(ends[0]["error"].get<std::string>(), "train: non-finite loss"));
  CHECK(ends[0]["config"]["lr"] == 1e30);
  auto runs = run_kiln("runs " + out + " --json");
  REQUIRE_MESSAGE(runs.status == 0, runs.output);
  const json rows = json::parse(runs.output);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0]["status"] == "failed");
  CHECK(rows[0]["predicted_peak"].is_number());  // from the start record
}
