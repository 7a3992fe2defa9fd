// `kiln predict`'s memory plan against the prediction (engine/run/plan_predict.h): for each of predict's
// three paths (labelled classification on arrays and on an image folder decoded by 2 loader workers,
// unlabelled images through a glob, segmentation with unet_small and masks), at two batch sizes that end in a short last batch, the measured whole-run peaks
// (allocated and reserved, from the model's copy to the device to the end of the pass) equal the plan's to
// the byte; `--dry-run` prints the same plan and writes nothing; a budget the plan does not fit is refused
// by --dry-run with status 1.
#include <doctest/doctest.h>

#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "support/cli/image_folder.h"
#include "support/cli/run_kiln.h"
#include "support/cli/segment_data.h"

namespace fs = std::filesystem;
using kiln_test::cli_temp_dir;
using kiln_test::CliRun;
using kiln_test::contains;
using kiln_test::run_kiln;

namespace {

struct PredictPath {
  std::string name, weights, data;
  std::vector<int> batches;  // each ends in a short last batch
  bool folder_out = false;   // segment: --out is a folder
};

// Trains one epoch of `args` and saves its weights.
std::string trained(const std::string& dir, const std::string& args) {
  const std::string w = dir + "/w.safetensors";
  const CliRun r = run_kiln("train " + args + " --epochs 1 --threads 1 --device cpu --out " + dir + "/run --save " + w);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  return w;
}

std::vector<PredictPath> predict_paths() {
  std::vector<PredictPath> paths;
  {  // labelled classification: npy arrays, 22 samples
    const std::string d = cli_temp_dir("predict_plan_arrays");
    fs::create_directories(d + "/data");
    kiln_test::make_npy_folder(d + "/data", 22, 3, 16, 4);
    paths.push_back({"classify, labelled arrays", trained(d, "--model small_cnn --data " + d + "/data --batch 8"),
                     d + "/data", {8, 5}});
  }
  {  // unlabelled images: 15 JPEGs through a glob
    const std::string d = cli_temp_dir("predict_plan_images");
    kiln_test::make_image_folder(d + "/set", 3, 10, 16, 3, false);
    const std::string w = trained(d, "--model small_cnn --data " + d + "/set --batch 8");
    paths.push_back({"classify, unlabelled images", w, "'" + d + "/set/val/*/*.jpg'", {4, 6}});
    // labelled: the folder's val/ split, decoded by 2 loader workers
    paths.push_back({"classify, labelled image folder, 2 workers", w, d + "/set --workers 2 --prefetch 2", {4, 6}});
  }
  {  // segmentation: unet_small, 12 images with masks
    const std::string d = cli_temp_dir("predict_plan_segment");
    fs::create_directories(d + "/data");
    kiln_test::make_segment_npy_folder(d + "/data", 12, 16, 5);
    paths.push_back({"segment, unet_small with masks",
                     trained(d, "--task segment --model unet_small --data " + d + "/data --batch 4"), d + "/data",
                     {5, 8}, true});
  }
  return paths;
}

// "memory: whole run: peak allocated X (planned Y, exact), peak reserved X (planned Y, exact)"
const std::regex kExactLine(R"(memory: whole run: peak allocated [^(]+\(planned [^,]+, exact\), peak reserved [^(]+\(planned [^,]+, exact\))");

// The plan's whole-run line: "whole run: peak allocated X, reserved Y; budget Z: fits".
std::string plan_line(const std::string& out) {
  std::smatch m;
  const std::regex line(R"(  whole run: peak allocated [^\n]*)");
  return std::regex_search(out, m, line) ? m.str() : std::string("(none)");
}

}  // namespace

TEST_CASE("predict memory plan: every path at two batch sizes, measured peaks == the plan's, --dry-run writes nothing") {
  for (const PredictPath& p : predict_paths()) {
    for (int batch : p.batches) {
      CAPTURE(p.name);
      CAPTURE(batch);
      const std::string dir = cli_temp_dir("predict_plan_out");
      const std::string out = dir + (p.folder_out ? "/pred" : "/pred.csv");
      const std::string args = "predict --weights " + p.weights + " --data " + p.data + " --batch " +
                               std::to_string(batch) + " --threads 1 --device cpu --out " + out;
      const CliRun dry = run_kiln(args + " --dry-run");
      REQUIRE_MESSAGE(dry.status == 0, dry.output);
      CHECK(contains(dry.output, "memory plan (cpu, the prediction replayed on the meta device"));
      CHECK(contains(dry.output, "short last batch: batch "));
      CHECK(contains(dry.output, "nothing written"));
      CHECK_FALSE(fs::exists(out));

      const CliRun run = run_kiln(args);
      REQUIRE_MESSAGE(run.status == 0, run.output);
      CHECK(fs::exists(out));
      MESSAGE(p.name, ", batch ", batch, ": ", plan_line(run.output));
      CHECK_MESSAGE(std::regex_search(run.output, kExactLine), run.output);
      CHECK(plan_line(run.output) == plan_line(dry.output));  // the dry run's plan is the run's
    }
  }
}

TEST_CASE("predict memory plan: a budget the plan does not fit is refused by --dry-run, status 1") {
  const std::string d = cli_temp_dir("predict_plan_budget");
  fs::create_directories(d + "/data");
    kiln_test::make_npy_folder(d + "/data", 10, 3, 16, 2);
  const std::string w = trained(d, "--model small_cnn --data " + d + "/data --batch 4");
  const CliRun r = run_kiln("predict --weights " + w + " --data " + d + "/data --threads 1 --device cpu --out " + d +
                            "/p.csv --dry-run --device-memory 1M");
  CHECK_MESSAGE(r.status == 1, r.output);
  CHECK(contains(r.output, "does NOT fit"));
  CHECK_FALSE(fs::exists(d + "/p.csv"));
}
