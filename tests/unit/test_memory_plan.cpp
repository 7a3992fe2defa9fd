// The run's memory plan against the run: for every configuration of the matrix below, `kiln train` (a
// subprocess) writes its measured whole-run peaks (peak_allocated, peak_reserved: engine/run/run_peaks.h) and
// its plan's (engine/run/plan_run.h) into the ledger's end record, and they are equal to the byte. Each row
// changes one thing of a base configuration; the pairs that interact are rows of their own. Small models,
// small images and few steps: the plan replays each phase to its fixed point, so a short run is
// representative. Also: --dry-run prints the same plan without training; a short last batch too small for
// batch norm is found at planning.
#include <doctest/doctest.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/cli/image_folder.h"
#include "support/cli/run_kiln.h"
#include "support/cli/segment_data.h"

namespace fs = std::filesystem;
using kiln_test::cli_temp_dir;
using kiln_test::CliRun;
using kiln_test::contains;
using kiln_test::last_ledger_line;
using kiln_test::run_kiln;

namespace {

struct Row {
  std::string name, args;
  int threads = 1;  // --threads (2: the bf16 weight gradient split between the threads, conv2d_bf16.h)
};

const std::string& images() {  // 3 classes, 10 train + 5 val images each, 24 px, RGB
  static const std::string d = [] {
    const std::string root = cli_temp_dir("plan_images");
    kiln_test::make_image_folder(root, 3, 10, 24, 3, false);
    return root;
  }();
  return d;
}

const std::string& arrays() {  // npy: 22 samples of 3x16x16, 4 classes (a short last batch at batch 8)
  static const std::string d = [] {
    const std::string root = cli_temp_dir("plan_npy");
    kiln_test::make_npy_folder(root, 22, 3, 16, 4);
    return root;
  }();
  return d;
}

const std::string& masks() {  // segmentation npy: 12 images of 16x16 with masks
  static const std::string d = [] {
    const std::string root = cli_temp_dir("plan_masks");
    kiln_test::make_segment_npy_folder(root, 12, 16, 5);
    return root;
  }();
  return d;
}

// Trains `args` and checks the end record: the measured whole-run peaks equal the plan's.
void check_row(const Row& row) {
  CAPTURE(row.name);
  CAPTURE(row.args);
  const std::string out = cli_temp_dir("plan_row");
  fs::remove_all(out);
  const CliRun r = run_kiln("train " + row.args + " --threads " + std::to_string(row.threads) + " --device cpu --out " +
                            out);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  const nlohmann::json run = last_ledger_line(out + "/runs.jsonl");
  REQUIRE(run.contains("plan"));
  REQUIRE(run["plan"]["planned"] == true);
  const int64_t pa = run["plan"]["peak_allocated"], pr = run["plan"]["peak_reserved"];
  const int64_t ma = run["peak_allocated"], mr = run["peak_reserved"];
  MESSAGE(row.name, ": allocated measured ", ma, " planned ", pa, "; reserved measured ", mr, " planned ", pr,
          " (reserved / allocated ", (double)mr / (double)ma, ")");
  CHECK(ma == pa);
  CHECK(mr == pr);
  CHECK(contains(r.output, "memory: whole run: peak allocated"));
  CHECK(contains(r.output, ", exact), peak reserved"));
}

}  // namespace

TEST_CASE("memory plan: every row of the matrix, measured whole-run peaks == the plan's, allocated and reserved") {
  const std::string cnn = "--model small_cnn --data " + arrays() + " --epochs 2 --batch 8";
  const std::string r18 = "--model resnet18_small --data " + images() + " --image-size 16 --epochs 2 --batch 6";
  const std::string file = "--model " + std::string(KILN_SOURCE_DIR) + "/docs/models/residual_cnn.json --data " +
                           images() + " --image-size 16 --epochs 2 --batch 6";
  const std::string unet = "--task segment --model unet_small --data " + masks() + " --epochs 2 --batch 4";
  const std::vector<Row> rows = {
      {"small_cnn, arrays, f32 SGD (a short last batch)", cnn},
      {"small_cnn, SGD momentum", cnn + " --momentum 0.9"},
      {"small_cnn, AdamW", cnn + " --optimizer adamw --lr 1e-3"},
      {"small_cnn, --amp", cnn + " --amp"},
      {"small_cnn, --amp bf16 (channels-last by default on the CPU)", cnn + " --amp bf16"},
      {"small_cnn, --accum 2", cnn + " --accum 2"},
      {"small_cnn, --clip 1", cnn + " --clip 1"},
      {"small_cnn, --drop-last", cnn + " --drop-last"},
      {"small_cnn, training state every 2 steps", cnn + " --checkpoint-every 2steps"},
      {"resnet18_small, image folder with val, 2 workers, --prefetch 2", r18 + " --workers 2 --prefetch 2"},
      {"resnet18_small, --recompute 2", r18 + " --recompute 2"},
      {"resnet18_small, --channels-last", r18 + " --channels-last"},
      {"resnet18_small, --image-size 16:1,24 (3 epochs)",
       "--model resnet18_small --data " + images() + " --image-size 16:1,24 --epochs 3 --batch 6"},
      {"resnet18_small, --amp x --recompute 2", r18 + " --amp --recompute 2"},
      {"resnet18_small, --amp x --accum 2", r18 + " --amp --accum 2"},
      {"resnet18_small, --amp bf16 (channels-last by default on the CPU)", r18 + " --amp bf16"},
      {"resnet18_small, --amp bf16 x --recompute 2", r18 + " --amp bf16 --recompute 2"},
      // 2 threads: the bf16 weight gradients split between the threads by image (every thread's f32 partials
      // in the workspace) or by output channel, the rest stage through f32 (the rule, conv2d_bf16_wgrad).
      {"resnet18_small, --amp bf16 (channels-last by default), 2 threads", r18 + " --amp bf16", 2},
      {"small_cnn, --amp bf16 (channels-last by default), 2 threads", cnn + " --amp bf16", 2},
      // bf16 on NCHW (the default before channels-last became bf16's on the CPU): kiln's NCHW paths and oneDNN's
      // NCHW workspaces, at 1 and 2 threads.
      {"resnet18_small, --amp bf16 --no-channels-last", r18 + " --amp bf16 --no-channels-last"},
      {"resnet18_small, --amp bf16 --no-channels-last, 2 threads", r18 + " --amp bf16 --no-channels-last", 2},
      {"resnet18_small, --batch-memory",
       "--model resnet18_small --data " + images() + " --batch-memory 120M --epochs 2"},
      {"resnet18_small, --batch-memory x --amp bf16",
       "--model resnet18_small --data " + images() + " --batch-memory 120M --epochs 2 --amp bf16"},
      {"model file, AdamW", file + " --optimizer adamw --lr 1e-3"},
      {"unet_small, --task segment", unet},
      {"unet_small, --task segment --amp", unet + " --amp"},
  };
  for (const Row& row : rows) check_row(row);
}

TEST_CASE("memory plan: a resumed run is planned from where it resumes") {
  const std::string out = cli_temp_dir("plan_resume"), whole = cli_temp_dir("plan_resume_whole");
  fs::remove_all(out);
  fs::remove_all(whole);
  const std::string args = "train --model small_cnn --data " + arrays() + " --epochs 2 --batch 4 --limit 12 "
                           "--threads 1 --device cpu --checkpoint-every 2steps --out ";
  REQUIRE(run_kiln(args + whole).status == 0);
  // Killed inside its second training-state write: the state of step 2 (mid-epoch 1 of 3 steps) is on disk.
  const int64_t bytes = (int64_t)fs::file_size(whole + "/checkpoint.safetensors");
  const CliRun killed = run_kiln(args + out, "KILN_TEST_KILL_WRITE_AT=" + std::to_string(bytes + bytes / 2));
  REQUIRE(killed.status != 0);
  const CliRun r = run_kiln(args + out + " --resume " + out + "/checkpoint.safetensors");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(contains(r.output, "resume: " + out + "/checkpoint.safetensors at epoch 0 + 2/3 steps"));
  const nlohmann::json run = last_ledger_line(out + "/runs.jsonl");
  CHECK(run["peak_allocated"] == run["plan"]["peak_allocated"]);
  CHECK(run["peak_reserved"] == run["plan"]["peak_reserved"]);
}

TEST_CASE("memory plan: --dry-run prints the plan the run keeps, trains nothing, and says whether it fits") {
  const std::string out = cli_temp_dir("plan_dry");
  fs::remove_all(out);
  const std::string args = "train --model small_cnn --data " + arrays() + " --epochs 2 --batch 8 --threads 1 "
                           "--device cpu --out " + out;
  const CliRun d = run_kiln(args + " --dry-run --json");
  REQUIRE_MESSAGE(d.status == 0, d.output);
  const nlohmann::json plan = nlohmann::json::parse(d.output.substr(d.output.find('{')));
  CHECK(plan["fits"] == true);
  CHECK(plan["phases"].size() >= 4);  // set-up, first step, steps, short last batch, validation
  CHECK_FALSE(fs::exists(out + "/runs.jsonl"));  // nothing written
  const CliRun t = run_kiln(args);
  REQUIRE_MESSAGE(t.status == 0, t.output);
  const nlohmann::json run = last_ledger_line(out + "/runs.jsonl");
  CHECK(run["plan"]["peak_allocated"] == plan["peak_allocated"]);
  CHECK(run["plan"]["peak_reserved"] == plan["peak_reserved"]);
  CHECK(run["peak_reserved"] == plan["peak_reserved"]);
  // Over a budget: exit 1, the refusal names where it runs out, and the remedies.
  const CliRun over = run_kiln(args + " --device-memory 4M --dry-run");
  CHECK(over.status == 1);
  CHECK_MESSAGE(contains(over.output, "it runs out of memory at "), over.output);
  CHECK(contains(over.output, "remedies (each alone: the run's plan with that one change"));
}

TEST_CASE("memory plan: --dry-run --amp bf16 plans the layout the run resolves (channels-last by default on the CPU)") {
  // The automatic layout (neither flag) must reach the plan as it reaches the step: the auto plan is the
  // explicit --channels-last plan to the byte, not the --no-channels-last one, and the run keeps it (exact).
  const std::string out = cli_temp_dir("plan_cl_auto");
  fs::remove_all(out);
  const std::string args = "train --model resnet18_small --data " + images() + " --image-size 16 --epochs 1 "
                           "--batch 6 --amp bf16 --threads 1 --device cpu --out " + out;
  auto plan_of = [&](const std::string& flags) {
    const CliRun d = run_kiln(args + flags + " --dry-run --json");
    REQUIRE_MESSAGE(d.status == 0, d.output);
    return nlohmann::json::parse(d.output.substr(d.output.find('{')));
  };
  const nlohmann::json automatic = plan_of(""), on = plan_of(" --channels-last"), off = plan_of(" --no-channels-last");
  MESSAGE("peak allocated / reserved: auto ", automatic["peak_allocated"], " / ", automatic["peak_reserved"],
          ", channels-last ", on["peak_allocated"], " / ", on["peak_reserved"], ", NCHW ", off["peak_allocated"],
          " / ", off["peak_reserved"]);
  CHECK(automatic["peak_allocated"] == on["peak_allocated"]);
  CHECK(automatic["peak_reserved"] == on["peak_reserved"]);
  CHECK(automatic["phases"] == on["phases"]);
  CHECK(automatic["phases"] != off["phases"]);
  const CliRun t = run_kiln(args);
  REQUIRE_MESSAGE(t.status == 0, t.output);
  const nlohmann::json run = last_ledger_line(out + "/runs.jsonl");
  CHECK(run["config"]["channels_last"] == true);
  CHECK(run["plan"]["peak_allocated"] == automatic["peak_allocated"]);
  CHECK(run["peak_allocated"] == automatic["peak_allocated"]);
  CHECK(run["peak_reserved"] == automatic["peak_reserved"]);
}

TEST_CASE("memory plan: a short last batch too small for batch norm is found at planning, naming --drop-last") {
  // resnet18 (not _small) at 32 px ends in 1x1 maps: a last batch of 1 image gives batch norm 1 value per
  // channel. 30 training images at --batch 29 leave one.
  const std::string out = cli_temp_dir("plan_bn1");
  const std::string args = "train --model resnet18 --data " + images() + " --image-size 32 --epochs 1 --batch 29 "
                           "--threads 1 --device cpu --out " + out;
  const CliRun r = run_kiln(args);
  CHECK(r.status == 1);
  CHECK_MESSAGE(contains(r.output, "the run's plan (its steps replayed on the meta device) fails at epoch 1, step 2"),
                r.output);
  CHECK(contains(r.output, "--drop-last leaves it out"));
  CHECK_FALSE(contains(r.output, "epoch 1/1"));  // nothing trained
  const CliRun ok = run_kiln(args + " --drop-last");
  CHECK_MESSAGE(ok.status == 0, ok.output);
}

TEST_CASE("memory plan: --recompute auto under a budget just below the plain run's need picks segments, and is exact") {
  const std::string out = cli_temp_dir("plan_auto");
  fs::remove_all(out);
  const std::string args = "train --model resnet18_small --data " + images() + " --image-size 16 --epochs 2 "
                           "--batch 6 --threads 1 --device cpu --out " + out;
  const CliRun plain = run_kiln(args + " --dry-run --json");
  REQUIRE_MESSAGE(plain.status == 0, plain.output);
  const int64_t need = nlohmann::json::parse(plain.output.substr(plain.output.find('{')))["peak_reserved"];
  const CliRun r = run_kiln(args + " --recompute auto --device-memory " + std::to_string(need - 1));
  REQUIRE_MESSAGE(r.status == 0, r.output);
  std::smatch m;
  REQUIRE(std::regex_search(r.output, m, std::regex("checkpoint auto: ([0-9]+) segments")));
  CHECK(std::stoi(m[1]) >= 2);  // plain training does not fit, so auto recomputes
  const nlohmann::json run = last_ledger_line(out + "/runs.jsonl");
  CHECK(run["peak_allocated"] == run["plan"]["peak_allocated"]);
  CHECK(run["peak_reserved"] == run["plan"]["peak_reserved"]);
  CHECK(run["peak_reserved"].get<int64_t>() <= need - 1);
}
