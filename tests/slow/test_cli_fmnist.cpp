// The main job, shortened: `kiln train` of the small CNN on Debian's Fashion-MNIST with the
// documented hyper-parameters but only the first 6000 training images and one epoch. It must learn
// (validation accuracy on the full t10k split >= 75%) and write its ledger line. Skipped with a
// message when dataset-fashion-mnist is not installed. The full run (2 epochs, >= 90%) is measured
// by hand; see scripts/main_job.sh.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/cli/run_kiln.h"

TEST_CASE("cli slow: small_cnn on the first 6000 Fashion-MNIST images") {
  const std::string data = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(data)) {
    MESSAGE("skipped: " << data << " not installed (apt install dataset-fashion-mnist)");
    return;
  }
  const std::string out = kiln_test::cli_temp_dir("fmnist_slow");
  auto r = kiln_test::run_kiln("train --model small_cnn --data " + data +
                               " --epochs 1 --batch 128 --optimizer sgd --lr 0.05 --momentum 0.9 --schedule cosine "
                               "--threads 2 --limit 6000 --out " +
                               out);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto ends = kiln_test::ledger_end_records(out + "/runs.jsonl");
  REQUIRE(ends.size() == 1);
  nlohmann::json j = ends[0];
  MESSAGE("val acc " << j["final_val_acc"] << ", " << j["images_per_s"] << " img/s, wall " << j["wall_s"] << " s");
  CHECK(j["data"]["train_samples"] == 6000);
  CHECK(j["data"]["val_samples"] == 10000);
  CHECK(j["final_val_acc"].get<double>() >= 0.75);
}
