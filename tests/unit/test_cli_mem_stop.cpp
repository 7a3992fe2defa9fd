// `kiln train` stops before the first step when the step's predicted peak (reserved bytes, meta
// run) does not fit the budget (--device-memory), with one error that lists the remedies and their
// predicted peaks; the largest batch it names trains and one more does not fit; --force runs
// anyway (into the real OOM, whose message lists the same remedies; format_oom_remedies in-process
// for memory taken by another process); a fitting budget trains as before. small_cnn at 32 px (a 27 MiB step against 12 MiB).
#include <doctest/doctest.h>

#include <regex>
#include <string>
#include <vector>

#include "support/cli/image_folder.h"
#include "support/cli/run_kiln.h"
#include "engine/memory/alloc_config.h"
#include "engine/run/mem_remedies.h"

using kiln_test::contains;
using kiln_test::run_kiln;

namespace {

// "12.50 MiB" -> bytes (B, KiB, MiB, GiB).
double parse_bytes(const std::string& num, const std::string& unit) {
  double v = std::stod(num);
  if (unit == "KiB") v *= 1024.0;
  if (unit == "MiB") v *= 1024.0 * 1024.0;
  if (unit == "GiB") v *= 1024.0 * 1024.0 * 1024.0;
  return v;
}

// The bytes after `label` ("label 12.5 MiB"), -1 when absent.
double bytes_after(const std::string& text, const std::string& label) {
  const std::regex re(std::regex_replace(label, std::regex(R"([.^$|()\[\]{}*+?\\-])"), R"(\$&)") +
                      R"(\s*([0-9]+(?:\.[0-9]+)?) (B|KiB|MiB|GiB))");
  std::smatch m;
  if (!std::regex_search(text, m, re)) return -1;
  return parse_bytes(m[1], m[2]);
}

// The remedy lines ("\n  --option: ...") of a stop or OOM message, without the --force line.
std::vector<std::string> remedy_lines(const std::string& text) {
  std::vector<std::string> out;
  const std::regex re(R"(\n  (--[^\n]*))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
    const std::string l = (*it)[1];
    if (l.rfind("--force", 0) != 0) out.push_back(l);
  }
  return out;
}

const std::string& npy32_dir() {
  static const std::string d = [] {
    std::string p = kiln_test::cli_temp_dir("memstop_npy32");
    kiln_test::make_npy_folder(p, 32, 3, 32, 2);
    return p;
  }();
  return d;
}

const std::string kBase = "train --model small_cnn --epochs 1 --threads 2 --device cpu --batch 32 ";
const std::string kBudget = "--device-memory 12M";

}  // namespace

TEST_CASE("cli mem stop: a run planned well over the budget stops before the first step, with remedies") {
  const std::string out = kiln_test::cli_temp_dir("memstop_stop");
  auto r = run_kiln(kBase + "--data " + npy32_dir() + " " + kBudget + " --out " + out);
  CHECK(r.status == 1);
  REQUIRE_MESSAGE(contains(r.output, "kiln: error: memory: the run's plan"), r.output);
  CHECK(contains(r.output, "does not fit the budget of 12.00 MiB (--device-memory 12M)"));
  CHECK(contains(r.output, "it runs out of memory at epoch 1, step 1"));  // where, from the replay
  CHECK(contains(r.output, "stopped before the first step"));
  CHECK_FALSE(contains(r.output, "out of memory on"));  // no real step ran
  CHECK_FALSE(contains(r.output, "epoch 1/1"));
  const double predicted = bytes_after(r.output, "without that limit it would take");
  CHECK_MESSAGE(predicted >= 1.5 * 12 * 1024 * 1024, r.output);  // no knife edge: clearly over

  // Each remedy with a predicted number.
  const std::regex accum(R"(\n  --accum ([0-9]+): ([0-9.]+) (B|KiB|MiB|GiB))");
  std::smatch m;
  CHECK_MESSAGE(std::regex_search(r.output, m, accum), r.output);
  CHECK(contains(r.output, "\n  --amp: "));
  CHECK(contains(r.output, "\n  --recompute "));
  CHECK(contains(r.output, "--force: run anyway"));
  CHECK_FALSE(contains(r.output, "--image-size"));  // npy data is used as stored

  // The largest batch: it trains under the same budget, and one more is planned not to fit.
  const std::regex batch(R"(\n  --batch ([0-9]+): ([0-9.]+) (B|KiB|MiB|GiB) \(fits\); --batch ([0-9]+) does not fit)");
  REQUIRE_MESSAGE(std::regex_search(r.output, m, batch), r.output);
  const int b = std::stoi(m[1]);
  CHECK(std::stoi(m[4]) == b + 1);
  REQUIRE(b >= 1);
  REQUIRE(b < 32);
  auto fit = run_kiln(kBase.substr(0, kBase.find("--batch")) + "--batch " + std::to_string(b) + " --data " +
                      npy32_dir() + " " + kBudget + " --out " + out);
  CHECK_MESSAGE(fit.status == 0, fit.output);
  CHECK(contains(fit.output, "epoch 1/1"));
  auto over = run_kiln(kBase.substr(0, kBase.find("--batch")) + "--batch " + std::to_string(b + 1) + " --data " +
                       npy32_dir() + " " + kBudget + " --out " + out);
  CHECK(over.status == 1);
  CHECK_MESSAGE(contains(over.output, "does not fit the budget of 12.00 MiB"), over.output);
}

TEST_CASE("cli mem stop: --force starts the run anyway, into the real out-of-memory, with the same remedies") {
  const std::string out = kiln_test::cli_temp_dir("memstop_force");
  auto r = run_kiln(kBase + "--data " + npy32_dir() + " " + kBudget + " --force --out " + out);
  CHECK(r.status == 1);
  CHECK_MESSAGE(contains(r.output, "running anyway (--force)"), r.output);
  CHECK(contains(r.output, "model: small_cnn"));  // got past the check and built the model
  CHECK(contains(r.output, "kiln: error: out of memory on cpu"));
  // The OOM message lists the pre-run stop's remedies, line for line (the same meta runs for the
  // same budget), instead of proportional guesses from what was live at the failure.
  CHECK_FALSE(contains(r.output, "what to try:"));
  CHECK(contains(r.output, "remedies for a budget of 12.00 MiB"));
  auto stop = run_kiln(kBase + "--data " + npy32_dir() + " " + kBudget + " --out " + out);
  REQUIRE(stop.status == 1);
  REQUIRE(contains(stop.output, "stopped before the first step"));
  const auto remedies = remedy_lines(stop.output);
  REQUIRE(remedies.size() >= 3);  // --batch, --accum, --amp, --recompute auto
  CHECK_MESSAGE(remedy_lines(r.output) == remedies, r.output, "\n---\n", stop.output);
}

TEST_CASE("cli mem stop: an out-of-memory whose plan fitted blames memory taken elsewhere, with remedies for it") {
  // The plan fits 12 MiB at batch 8; before step 1 the device's limit is lowered to 6 MiB (KILN_TEST_SHRINK_DEVICE,
  // a test switch of the kiln command: "another process took the rest").
  const std::string out = kiln_test::cli_temp_dir("memstop_elsewhere");
  const std::string base = kBase.substr(0, kBase.find("--batch")) + "--batch 8 --data " + npy32_dir() + " " + kBudget;
  auto r = run_kiln(base + " --out " + out, "KILN_TEST_SHRINK_DEVICE=6291456:1");
  CHECK(r.status == 1);
  REQUIRE_MESSAGE(contains(r.output, "kiln: error: out of memory on cpu"), r.output);
  CHECK(contains(r.output, "at epoch 1, step 1 (batch 8 x 32 px); the plan for this phase (first step: batch 8 x 32 px)"));
  CHECK(contains(r.output, "kiln held no more than its plan: the memory went elsewhere"));
  CHECK(contains(r.output, "remedies for a budget of "));
  // Never the failing configuration or more of it: no --batch of 8 or above, no --recompute of 0 segments.
  for (const std::string& l : remedy_lines(r.output.substr(r.output.find("remedies for a budget of ")))) {
    CAPTURE(l);
    std::smatch m;
    if (std::regex_search(l, m, std::regex(R"(^--batch ([0-9]+))"))) CHECK(std::stoi(m[1]) < 8);
    CHECK(l.rfind("--recompute 0", 0) != 0);
  }
}

TEST_CASE("cli mem stop: a budget that fits trains as before") {
  const std::string out = kiln_test::cli_temp_dir("memstop_fits");
  auto r = run_kiln(kBase + "--data " + npy32_dir() + " --device-memory 256M --out " + out);
  CHECK_MESSAGE(r.status == 0, r.output);
  CHECK(contains(r.output, "epoch 1/1"));
  CHECK_FALSE(contains(r.output, "does not fit"));
}

TEST_CASE("cli mem stop: image folders also get a smaller --image-size, and it trains") {
  const std::string d = kiln_test::cli_temp_dir("memstop_images"), out = kiln_test::cli_temp_dir("memstop_img_out");
  kiln_test::make_image_folder(d, 2, 16, 48, 3, false);
  const std::string base = "train --model small_cnn --epochs 1 --threads 2 --device cpu --batch 32 --data " + d +
                           " " + kBudget + " --out " + out;
  auto r = run_kiln(base + " --image-size 48");
  CHECK(r.status == 1);
  const std::regex size(R"(\n  --image-size ([0-9]+): ([0-9.]+) (B|KiB|MiB|GiB) \(fits\))");
  std::smatch m;
  REQUIRE_MESSAGE(std::regex_search(r.output, m, size), r.output);
  const int s = std::stoi(m[1]);
  CHECK(s < 48);
  auto fit = run_kiln(base + " --image-size " + std::to_string(s));
  CHECK_MESSAGE(fit.status == 0, fit.output);
  CHECK(contains(fit.output, "epoch 1/1"));
}
