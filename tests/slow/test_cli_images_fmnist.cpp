// The main job's JPEG path, shortened: Fashion-MNIST exported once as a grayscale JPEG folder
// (`kiln export-images`, 70k files; reused from $KILN_FMNIST_JPEG when set), then small_cnn trained
// from the folder on 6000 training images (spread over the classes) for one epoch. It must learn
// (validation accuracy on the 10k test/ images >= 75%), report no bad samples, and the ledger
// must show the image format. Skipped with a message when dataset-fashion-mnist is not installed.
// The full run (2 epochs, >= 90%) is scripts/main_job.sh.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/cli/run_kiln.h"

TEST_CASE("cli slow: small_cnn from a Fashion-MNIST JPEG folder") {
  const std::string data = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(data)) {
    MESSAGE("skipped: " << data << " not installed (apt install dataset-fashion-mnist)");
    return;
  }
  const char* env = std::getenv("KILN_FMNIST_JPEG");
  const std::string jpeg = env && *env ? env : kiln_test::cli_temp_dir("fmnist_jpeg") + "/jpg";
  auto e = kiln_test::run_kiln("export-images --data " + data + " --out " + jpeg);
  REQUIRE_MESSAGE(e.status == 0, e.output);
  const std::string out = kiln_test::cli_temp_dir("fmnist_jpeg_run");
  auto r = kiln_test::run_kiln("train --model small_cnn --data " + jpeg +
                               " --channels 1 --normalize auto --epochs 1 --batch 64 --optimizer sgd --lr 0.05 "
                               "--momentum 0.9 --schedule cosine --threads 2 --limit 6000 --out " + out);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto ends = kiln_test::ledger_end_records(out + "/runs.jsonl");
  REQUIRE(ends.size() == 1);
  nlohmann::json j = ends[0];
  MESSAGE("val acc " << j["final_val_acc"] << ", " << j["images_per_s"] << " img/s, wall " << j["wall_s"] << " s");
  CHECK(j["data"]["format"] == "images");
  CHECK(j["data"]["train_samples"] == 6000);
  CHECK(j["data"]["val_samples"] == 10000);
  CHECK(j["data"]["bad_samples"] == 0);
  CHECK(j["final_val_acc"].get<double>() >= 0.75);
}
