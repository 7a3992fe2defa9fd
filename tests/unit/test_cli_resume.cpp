// `kiln train` training-state files mid-epoch and the faults around them, end to end on a tiny
// npy data set (40 samples, 8x8, small_cnn with dropout; batch 4: 10 steps an epoch):
// - a run killed while writing its second state file (KILN_TEST_KILL_WRITE_AT, engine/io/atomic_file.h)
//   resumes from the first one, saved mid-epoch, and ends with the bytes of an uninterrupted run;
// - a full disk (RLIMIT_FSIZE with SIGXFSZ ignored: the write fails with EFBIG) and a read-only
//   --out (a read-only bind mount in a private mount namespace): one error naming the file, the
//   previous state intact, no temporary left; an unwritable --out or a missing --save folder is
//   reported before the first step;
// - an image folder with --augment rrc and --balance resumes mid-epoch to the same bytes;
// - --resume with contradicting flags is refused with one line naming each difference, unless
//   --resume-override; then a different optimizer starts fresh and the measured optimizer memory
//   is the predicted one.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/io/file_bytes.h"
#include "engine/io/safetensors.h"
#include "support/cli/image_folder.h"
#include "support/cli/run_kiln.h"
#include "engine/run/run_config.h"

using kiln_test::contains;
using kiln_test::run_kiln;
namespace fs = std::filesystem;

namespace {

const std::string& data_dir() {
  static const std::string d = [] {
    std::string p = kiln_test::cli_temp_dir("resume_data");
    kiln_test::make_npy_folder(p, 40, 1, 8, 2);
    return p;
  }();
  return d;
}

std::string train_args(const std::string& out, const std::string& extra = "", int epochs = 3,
                       const std::string& every = "7steps") {
  return "train --model small_cnn --data " + data_dir() + " --epochs " + std::to_string(epochs) +
         " --batch 4 --optimizer sgd --lr 0.05 --momentum 0.9 --schedule step:1:0.5 --seed 5 "
         "--threads 1 --device cpu --checkpoint-every " + every + " --out " + out + " " + extra;
}

int count_temporaries(const std::string& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += (int)contains(e.path().filename().string(), ".tmp.");
  return n;
}

// Same tensors, byte for byte; whole_file: the metadata too (a state file's holds the run's flags,
// which name --resume and --save, so two state files compare by tensors only).
void check_same_bytes(const std::string& a, const std::string& b, bool whole_file) {
  kiln::SafetensorsFile wa = kiln::read_safetensors(a), wb = kiln::read_safetensors(b);
  REQUIRE(wa.tensors.size() == wb.tensors.size());
  for (size_t i = 0; i < wa.tensors.size(); ++i) {
    CHECK(wa.tensors[i].name == wb.tensors[i].name);
    CHECK_MESSAGE(wa.tensors[i].array.bytes == wb.tensors[i].array.bytes, wa.tensors[i].name);
  }
  if (whole_file) CHECK(kiln::read_file_bytes(a) == kiln::read_file_bytes(b));
}

// One uninterrupted run's final weights and state file size, shared by the tests.
struct Reference {
  std::string dir, weights;
  int64_t state_bytes = 0;
  nlohmann::json ledger;
};
const Reference& reference() {
  static const Reference r = [] {
    Reference x;
    x.dir = kiln_test::cli_temp_dir("resume_ref");
    x.weights = x.dir + "/w.safetensors";
    auto run = run_kiln(train_args(x.dir, "--save " + x.weights));
    REQUIRE_MESSAGE(run.status == 0, run.output);
    x.state_bytes = (int64_t)fs::file_size(x.dir + "/checkpoint.safetensors");
    x.ledger = kiln_test::last_ledger_line(x.dir + "/runs.jsonl");
    return x;
  }();
  return r;
}

}  // namespace

TEST_CASE("--checkpoint-every: N and Nep are epochs, Nsteps optimizer steps, both with a comma") {
  kiln::RunConfig c;
  kiln::parse_checkpoint_every("2", &c);
  CHECK((c.checkpoint_every == 2 && c.checkpoint_steps == 0));
  kiln::parse_checkpoint_every("0", &c);
  CHECK((c.checkpoint_every == 0 && c.checkpoint_steps == 0));
  kiln::parse_checkpoint_every("500steps", &c);
  CHECK((c.checkpoint_every == 0 && c.checkpoint_steps == 500));
  kiln::parse_checkpoint_every("3ep,20steps", &c);
  CHECK((c.checkpoint_every == 3 && c.checkpoint_steps == 20));
  for (const char* bad : {"", "x", "0steps", "5min", "-1", "2ep,3ep", "ep", "1,2"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(kiln::parse_checkpoint_every(bad, &c), doctest::Contains("--checkpoint-every"), kiln::Error);
  }
}

TEST_CASE("kiln train: killed while writing a mid-epoch state, --resume gives the uninterrupted run's bytes") {
  const Reference& ref = reference();
  const std::string b = kiln_test::cli_temp_dir("resume_killed");
  // Killed half-way through the second state file (after step 14): the first (after step 7 of
  // epoch 1's 10) is the newest complete one, and the second's temporary is left behind.
  const int64_t kill_at = ref.state_bytes + ref.state_bytes / 2;
  auto killed = run_kiln(train_args(b), "KILN_TEST_KILL_WRITE_AT=" + std::to_string(kill_at));
  CHECK((killed.status == -1 || killed.status == 128 + 9));  // SIGKILL (seen directly or through sh)
  kiln::SafetensorsFile st = kiln::read_safetensors(b + "/checkpoint.safetensors");
  CHECK(st.metadata.at("epoch") == "0");
  CHECK(st.metadata.at("step") == "7");
  CHECK(st.metadata.at("step_in_epoch") == "7");
  CHECK(count_temporaries(b) == 1);

  auto resumed = run_kiln(train_args(b, "--resume " + b + "/checkpoint.safetensors --save " + b + "/w.safetensors"));
  REQUIRE_MESSAGE(resumed.status == 0, resumed.output);
  CHECK(contains(resumed.output, "at epoch 0 + 7/10 steps, step 7"));
  CHECK(contains(resumed.output, "removed " + b + "/checkpoint.safetensors.tmp."));
  CHECK(count_temporaries(b) == 0);
  check_same_bytes(ref.weights, b + "/w.safetensors", true);
  check_same_bytes(ref.dir + "/checkpoint.safetensors", b + "/checkpoint.safetensors", false);
  // The resumed epoch reports the uninterrupted epoch's numbers (its first 7 steps' sums were saved).
  const nlohmann::json lb = kiln_test::last_ledger_line(b + "/runs.jsonl");
  REQUIRE(lb["epochs"].size() == 3);
  for (int e = 0; e < 3; ++e) {
    CHECK(lb["epochs"][e]["train_loss"] == ref.ledger["epochs"][e]["train_loss"]);
    CHECK(lb["epochs"][e]["train_acc"] == ref.ledger["epochs"][e]["train_acc"]);
  }
}

TEST_CASE("kiln train: a full disk while writing the state: one error naming the file, previous state intact") {
  const std::string b = kiln_test::cli_temp_dir("resume_full");
  auto first = run_kiln(train_args(b, "", 1, "1"));
  REQUIRE_MESSAGE(first.status == 0, first.output);
  const std::string state = b + "/checkpoint.safetensors";
  const std::vector<uint8_t> before = kiln::read_file_bytes(state);
  // ulimit -f counts 512- or 1024-byte blocks depending on the shell: either way under a state file.
  const std::string limit = std::to_string(before.size() / 2 / 1024);
  auto full = run_kiln(train_args(b, "--resume " + state), "trap '' XFSZ; ulimit -f " + limit + ";");
  CHECK(full.status == 1);
  CAPTURE(full.output);
  CHECK(contains(full.output, "kiln: error: " + state + ": atomic write failed: write to " + state + ".tmp."));
  CHECK(contains(full.output, "File too large"));
  CHECK(contains(full.output, "the previous file is unchanged"));
  CHECK(kiln::read_file_bytes(state) == before);
  CHECK(count_temporaries(b) == 0);
}

TEST_CASE("kiln train: an --out that cannot be written or a missing --save folder stops before the first step") {
  const std::string b = kiln_test::cli_temp_dir("resume_ro");
  auto first = run_kiln(train_args(b, "", 1));
  REQUIRE_MESSAGE(first.status == 0, first.output);
  const std::vector<uint8_t> before = kiln::read_file_bytes(b + "/checkpoint.safetensors");

  auto missing = run_kiln(train_args(b, "--save " + b + "/no/such/w.safetensors"));
  CHECK(missing.status == 1);
  CHECK(contains(missing.output, "--save " + b + "/no/such/w.safetensors: its folder " + b +
                                     "/no/such: folder does not exist"));
  CHECK(!contains(missing.output, "epoch 1/"));
  auto onto_folder = run_kiln(train_args(b, "--save " + b));
  CHECK(onto_folder.status == 1);
  CHECK(contains(onto_folder.output, "is a folder"));

  // As root chmod makes nothing read-only: a read-only bind mount in a private mount namespace does.
  const std::string ro = "unshare -m sh -c 'mount --bind " + b + " " + b + " && mount -o remount,ro,bind " + b +
                         " && OMP_WAIT_POLICY=passive " + KILN_BINARY_DIR + "/kiln " + train_args(b) + "' 2>&1";
  if (run_kiln("devices", "unshare -m sh -c 'mount --bind " + b + " " + b + "' && ").status != 0) {
    MESSAGE("skipped: read-only bind mounts need unshare -m and mount (root) on this machine");
    return;
  }
  kiln_test::CliRun r;
  FILE* p = ::popen(ro.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  CAPTURE(r.output);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK(contains(r.output, "kiln: error: --out " + b + ": cannot write there (Read-only file system)"));
  CHECK(!contains(r.output, "data:"));  // before the data, so long before the first step
  CHECK(kiln::read_file_bytes(b + "/checkpoint.safetensors") == before);
  CHECK(count_temporaries(b) == 0);
}

TEST_CASE("kiln train: --resume refuses contradicting flags, --resume-override trains on with what the prediction covers") {
  const std::string b = kiln_test::cli_temp_dir("resume_flags");
  const std::string base = "train --model small_cnn --data " + data_dir() +
                           " --seed 5 --threads 1 --device cpu --out " + b;
  auto first = run_kiln(base + " --epochs 1 --batch 8 --optimizer adamw --lr 0.001");
  REQUIRE_MESSAGE(first.status == 0, first.output);
  const std::string resume = " --resume " + b + "/checkpoint.safetensors";

  auto same = run_kiln(base + " --epochs 2 --batch 8 --optimizer adamw --lr 0.001" + resume);
  REQUIRE_MESSAGE(same.status == 0, same.output);

  auto refused = run_kiln(base + " --epochs 3 --optimizer sgd --batch 4 --limit 20" + resume);
  CHECK(refused.status == 1);
  CAPTURE(refused.output);
  CHECK(contains(refused.output, "kiln: error: --resume: " + b + "/checkpoint.safetensors was saved with other settings: "
                                 "optimizer: saved adamw, now sgd; lr: saved 0.001, now 0.01; weight_decay: saved "
                                 "0.01, now 0.0; batch: saved 8, now 4; limit: saved -1, now 20 (pass the saved "
                                 "values, or --resume-override"));
  CHECK(!contains(refused.output, "epoch 2/"));

  auto over = run_kiln(base + " --epochs 3 --optimizer sgd --batch 4 --limit 20 --resume-override" + resume);
  REQUIRE_MESSAGE(over.status == 0, over.output);
  CHECK(contains(over.output, "resume: --resume-override: optimizer: saved adamw, now sgd"));
  CHECK(contains(over.output, "it is not loaded, the optimizer starts fresh"));
  // SGD without momentum keeps no state: predicted 0, and measured 0 (the AdamW moments were not loaded).
  const nlohmann::json j = kiln_test::last_ledger_line(b + "/runs.jsonl");
  CHECK(j["memory"]["predicted"]["optimizer_state"] == 0);
  REQUIRE(j["memory"]["measured_epochs"].size() == 1);
  CHECK(j["memory"]["measured_epochs"][0]["measured_tag_peak"]["optimizer"] == 0);
}

TEST_CASE("kiln train: an image folder with --augment rrc resumed mid-epoch gives the uninterrupted run's bytes") {
  // 2 classes x 12 JPEGs (16 px, gray), batch 4: 6 steps an epoch; the state after step 4 is mid-epoch.
  const std::string root = kiln_test::cli_temp_dir("resume_images");
  kiln_test::make_image_folder(root, 2, 12, 16, 1, false);
  auto args = [&](const std::string& out, const std::string& extra) {
    return "train --model small_cnn --data " + root + " --channels 1 --image-size 12 --augment rrc --balance "
           "--epochs 2 --batch 4 --workers 2 --optimizer sgd --lr 0.05 --momentum 0.9 --seed 9 --threads 1 "
           "--device cpu --checkpoint-every 4steps --out " + out + " --save " + out + "/w.safetensors " + extra;
  };
  const std::string a = kiln_test::cli_temp_dir("resume_images_a"), b = kiln_test::cli_temp_dir("resume_images_b");
  auto ra = run_kiln(args(a, ""));
  REQUIRE_MESSAGE(ra.status == 0, ra.output);
  const int64_t state_bytes = (int64_t)fs::file_size(a + "/checkpoint.safetensors");
  // Killed in the second state write (after step 8 = epoch 2, step 2): the first, after step 4, is kept.
  auto killed = run_kiln(args(b, ""), "KILN_TEST_KILL_WRITE_AT=" + std::to_string(state_bytes + state_bytes / 2));
  CHECK((killed.status == -1 || killed.status == 128 + 9));
  REQUIRE(kiln::read_safetensors(b + "/checkpoint.safetensors").metadata.at("step_in_epoch") == "4");
  auto resumed = run_kiln(args(b, "--resume " + b + "/checkpoint.safetensors"));
  REQUIRE_MESSAGE(resumed.status == 0, resumed.output);
  CHECK(contains(resumed.output, "at epoch 0 + 4/6 steps, step 4"));
  check_same_bytes(a + "/w.safetensors", b + "/w.safetensors", true);
}

TEST_CASE("kiln train: batches emptied by bad files count as steps, so a resumed run gives the uninterrupted run's bytes") {
  // 2 classes x 6 good JPEGs plus 6 truncated ones, batch 1: 18 steps an epoch, 6 of them empty (every
  // sample bad). The state after step 6 of epoch 1 follows at least one empty batch (epoch_seen < 6),
  // so a step counter that skipped empty batches would resume at another loader batch.
  const std::string root = kiln_test::cli_temp_dir("resume_bad_batches");
  const std::string bad = kiln_test::make_image_folder(root, 2, 6, 16, 1, true);
  for (int i = 0; i < 5; ++i)
    fs::copy_file(bad, root + "/train/class" + std::to_string(i % 2) + "/zz_bad" + std::to_string(i) + ".jpg");
  auto args = [&](const std::string& out, const std::string& extra) {
    return "train --model small_cnn --data " + root + " --channels 1 --image-size 12 --epochs 2 --batch 1 "
           "--workers 1 --optimizer sgd --lr 0.05 --momentum 0.9 --seed 9 --threads 1 --device cpu "
           "--checkpoint-every 6steps --out " + out + " --save " + out + "/w.safetensors " + extra;
  };
  const std::string a = kiln_test::cli_temp_dir("resume_bad_a"), b = kiln_test::cli_temp_dir("resume_bad_b");
  auto ra = run_kiln(args(a, ""));
  REQUIRE_MESSAGE(ra.status == 0, ra.output);
  CHECK(contains(ra.output, "18 steps/epoch"));
  const nlohmann::json la = kiln_test::last_ledger_line(a + "/runs.jsonl");
  CHECK(la["steps"] == 36);
  REQUIRE(la["epochs"].size() == 2);
  CHECK(la["epochs"][0]["undefined_batches"] == 6);  // each bad file is one empty batch
  CHECK(la["epochs"][1]["undefined_batches"] == 6);
  const int64_t state_bytes = (int64_t)fs::file_size(a + "/checkpoint.safetensors");
  // Killed in the second state write (after step 12): the first, after step 6, is kept.
  auto killed = run_kiln(args(b, ""), "KILN_TEST_KILL_WRITE_AT=" + std::to_string(state_bytes + state_bytes / 2));
  CHECK((killed.status == -1 || killed.status == 128 + 9));
  const kiln::SafetensorsFile st = kiln::read_safetensors(b + "/checkpoint.safetensors");
  REQUIRE(st.metadata.at("step_in_epoch") == "6");
  CHECK(std::stoll(st.metadata.at("epoch_seen")) < 6);  // the case this test is for: an empty batch came first
  auto resumed = run_kiln(args(b, "--resume " + b + "/checkpoint.safetensors"));
  REQUIRE_MESSAGE(resumed.status == 0, resumed.output);
  CHECK(contains(resumed.output, "at epoch 0 + 6/18 steps, step 6"));
  check_same_bytes(a + "/w.safetensors", b + "/w.safetensors", true);
  const nlohmann::json lb = kiln_test::last_ledger_line(b + "/runs.jsonl");
  CHECK(lb["steps"] == 36);
  CHECK(lb["epochs"][0]["undefined_batches"] == la["epochs"][0]["undefined_batches"]);
  CHECK(lb["epochs"][1]["train_loss"] == la["epochs"][1]["train_loss"]);
}
