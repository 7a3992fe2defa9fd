// --amp against f32 on Fashion-MNIST: the main job (`kiln train` of the small CNN, 2 epochs on all
// 60000 images, tests/support/cli/main_job.sh's hyper-parameters), once in f32 and once with --amp
// (same data, same seed); the --amp validation accuracy (full t10k split) must be within 1 point
// of f32's, and the run must not have skipped more than a handful of steps. Takes ~10 minutes on
// 2 threads. A shortened run is too noisy for 0.3 points: with --limit 12000 and one epoch the two
// differed by 0.84 points (f32 81.12%), while the full job measured 90.16% vs 90.12%.
// Skipped with a message when dataset-fashion-mnist is not installed.
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
                               " --epochs 2 --batch 64 --optimizer sgd --lr 0.05 --momentum 0.9 --schedule cosine "
                               "--seed 0 --threads 2 --out " +
                               out + extra);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto ends = kiln_test::ledger_end_records(out + "/runs.jsonl");
  REQUIRE(ends.size() == 1);
  return ends[0];
}

}  // namespace

TEST_CASE("amp slow: small_cnn on Fashion-MNIST, 2 epochs, --amp within 0.3 points of f32") {
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
  CHECK(amp["data"]["train_samples"] == 60000);
  CHECK(a32 >= 0.89);
  // 10000 validation images at ~90%: one run's accuracy has a binomial spread of 0.3 points, so a
  // 0.3-point bound (this test's first one) was one sigma and another CPU's rounding could cross
  // it; 1 point is more than 3 sigma and still fails an --amp that costs accuracy.
  CHECK(std::fabs(a16 - a32) <= 0.01);
  CHECK(amp["amp"]["skipped_steps"].get<int64_t>() <= 5);
}
