// The pre-flight against the run, over randomized configurations (a fixed seed and count): model, batch,
// image size, optimizer, --amp, --recompute and a validation split, each under a --device-memory budget drawn
// around what its plan needs. A plan that fits must train to the end without running out of memory; a plan
// that does not fit names where the run would run out, a --force run fails exactly there, and up to two of
// the remedies it lists each train within the budget. The plan is an exact replay, so no draw is a knife edge
// for it: the same machine computes both sides.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/cli/image_folder.h"
#include "support/cli/run_kiln.h"

namespace fs = std::filesystem;
using kiln_test::cli_temp_dir;
using kiln_test::CliRun;
using kiln_test::contains;
using kiln_test::run_kiln;

namespace {

// A configuration as flags, so a remedy replaces one of them.
using Flags = std::map<std::string, std::string>;  // "--batch" -> "6"; value "" for a bare flag

std::string command(const Flags& f) {
  std::string s = "train";
  for (const auto& [k, v] : f) s += " " + k + (v.empty() ? "" : " " + v);
  return s;
}

nlohmann::json dry_run(const Flags& f) {
  const CliRun r = run_kiln(command(f) + " --dry-run --json");
  REQUIRE_MESSAGE(r.status <= 1, r.output);
  return nlohmann::json::parse(r.output.substr(r.output.find('{')));
}

// "--batch 5: 12.00 MiB (fits)" lines of a refusal -> the flags they set.
std::vector<Flags> fitting_remedies(const std::string& refusal) {
  std::vector<Flags> out;
  const std::regex line(R"(\n  (--[a-z-]+)( [0-9]+)?( --accum [0-9]+)?: [0-9.]+ (B|KiB|MiB|GiB) \(fits\))");
  for (auto it = std::sregex_iterator(refusal.begin(), refusal.end(), line); it != std::sregex_iterator(); ++it) {
    Flags f;
    f[(*it)[1]] = (*it)[2].matched ? std::string((*it)[2]).substr(1) : "";
    if ((*it)[3].matched) f["--accum"] = std::string((*it)[3]).substr(9);
    out.push_back(f);
  }
  return out;
}

}  // namespace

TEST_CASE("memory pre-flight: randomized runs under a budget, each plan that fits trains, each refusal is right") {
  const std::string root = cli_temp_dir("preflight_images"), npy = cli_temp_dir("preflight_npy");
  kiln_test::make_image_folder(root, 3, 8, 24, 3, false);  // 24 train + 12 val images
  kiln_test::make_npy_folder(npy, 20, 3, 16, 4);
  std::mt19937 rng(20261206);
  auto pick = [&](std::vector<std::string> v) { return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)]; };
  int tried = 0, fitted = 0, refused = 0, ooms = 0, forced_there = 0, remedies_run = 0;
  for (int i = 0; i < 10; ++i) {
    Flags f;
    const bool r18 = i % 2 == 0;
    f["--model"] = r18 ? "resnet18_small" : "small_cnn";
    f["--data"] = r18 ? pick({root, root + "/train"}) : npy;  // with and without a validation split
    if (r18) f["--image-size"] = pick({"16", "24"});
    f["--batch"] = std::to_string(std::uniform_int_distribution<int>(3, 10)(rng));
    f["--epochs"] = "2";
    f["--threads"] = "1";
    f["--device"] = "cpu";
    f["--out"] = cli_temp_dir("preflight_run");
    const std::string opt = pick({"sgd", "momentum", "adamw"});
    f["--optimizer"] = opt == "adamw" ? "adamw" : "sgd";
    if (opt == "momentum") f["--momentum"] = "0.9";
    if (pick({"f32", "amp"}) == "amp") f["--amp"] = "";
    if (r18 && pick({"plain", "recompute"}) == "recompute") f["--recompute"] = "2";
    CAPTURE(command(f));
    ++tried;
    // The budget: what the plan needs without a limit, times a draw in [0.8, 0.98) or [1.02, 1.2), each side
    // for half the configurations of each model.
    const int64_t need = dry_run(f)["peak_reserved"];
    const double factor = i % 4 < 2 ? std::uniform_real_distribution<double>(0.8, 0.98)(rng)
                                    : std::uniform_real_distribution<double>(1.02, 1.2)(rng);
    f["--device-memory"] = std::to_string((int64_t)((double)need * factor));
    const nlohmann::json plan = dry_run(f);
    MESSAGE(command(f), ": budget ", factor, " x the plan's need: ", std::string(plan["fits"] == true ? "fits" : "refused"));
    if (plan["fits"] == true) {
      ++fitted;
      const CliRun r = run_kiln(command(f));
      CHECK_MESSAGE(r.status == 0, r.output);
      if (contains(r.output, "out of memory")) ++ooms;
      continue;
    }
    ++refused;
    const std::string refusal = plan["refusal"];
    std::smatch m;
    REQUIRE_MESSAGE(std::regex_search(refusal, m, std::regex(R"(it runs out of memory at ([^;]+\)))")), refusal);
    const std::string where = m[1];
    Flags forced = f;
    forced["--force"] = "";
    const CliRun r = run_kiln(command(forced));
    CHECK(r.status == 1);
    CHECK_MESSAGE(contains(r.output, "kiln: error: out of memory on cpu"), r.output);
    if (contains(r.output, "  at " + where + ";")) ++forced_there;
    CHECK_MESSAGE(contains(r.output, "  at " + where + ";"), "the plan said ", where, "\n", r.output);
    int run_here = 0;
    for (const Flags& remedy : fitting_remedies(refusal)) {
      if (run_here == 2) break;
      Flags g = f;
      for (const auto& [k, v] : remedy) g[k] = v;
      CAPTURE(command(g));
      const CliRun ok = run_kiln(command(g));
      CHECK_MESSAGE(ok.status == 0, ok.output);
      ++run_here, ++remedies_run;
    }
  }
  MESSAGE("pre-flight: ", tried, " configurations, ", fitted, " fitted and trained, ", refused, " refused (",
          forced_there, " forced runs ran out exactly where planned, ", remedies_run, " remedies trained), ", ooms,
          " out-of-memory among the fitted");
  CHECK(ooms == 0);
  CHECK(fitted >= 4);   // both outcomes were drawn: the test saw each side
  CHECK(refused >= 4);
  CHECK(forced_there == refused);
}
