// --amp against f32 on Fashion-MNIST: `kiln train` of the small CNN with the main job's
// hyper-parameters, on the first 12000 training images for one epoch, once in f32 and once with
// --amp (same data, same seed); the --amp validation accuracy (full t10k split) must be within
// 0.3 points of f32's, and the run must not have skipped more than a handful of steps. Skipped with
// a message when dataset-fashion-mnist is not installed. The full 2-epoch comparison is measured by
// hand (tests/support/cli/main_job.sh with --amp; numbers in the commit message).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/cli/run_kiln.h"

namespace {

nlohmann::json run_fmnist(const std::string& data, const std::string& name, const std::string& extra) {
  const std::string out = kiln_test::cli_temp_dir(name);
  auto r = kiln_test::run_kiln("train --model small_cnn --data " + data +
                               " --epochs 1 --batch 64 --optimizer sgd --lr 0.05 --momentum 0.9 --schedule cosine "
                               "--seed 0 --threads 2 --limit 12000 --out " +
                               out + extra);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  std::ifstream f(out + "/runs.jsonl");
  std::string line;
  REQUIRE(std::getline(f, line));
  return nlohmann::json::parse(line);
}

}  // namespace

TEST_CASE("amp slow: small_cnn on 12000 Fashion-MNIST images, --amp within 0.3 points of f32") {
  const std::string data = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(data)) {
    MESSAGE("skipped: " << data << " not installed (apt install dataset-fashion-mnist)");
    return;
  }
  nlohmann::json f32 = run_fmnist(data, "amp_slow_f32", "");
  nlohmann::json amp = run_fmnist(data, "amp_slow_amp", " --amp");
  const double a32 = f32["final_val_acc"].get<double>(), a16 = amp["final_val_acc"].get<double>();
  MESSAGE("val acc f32 " << 100 * a32 << "%, amp " << 100 * a16 << "% (" << f32["images_per_s"] << " vs "
                         << amp["images_per_s"] << " img/s), amp loss scale " << amp["amp"]["loss_scale"]
                         << ", skipped " << amp["amp"]["skipped_steps"]);
  CHECK(f32["amp"]["enabled"] == false);
  CHECK(amp["amp"]["enabled"] == true);
  CHECK(amp["data"]["train_samples"] == 12000);
  CHECK(a32 >= 0.75);
  CHECK(std::fabs(a16 - a32) <= 0.003);
  CHECK(amp["amp"]["skipped_steps"].get<int64_t>() <= 5);
}
