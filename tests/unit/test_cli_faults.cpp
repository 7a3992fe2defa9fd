// `kiln` as a new user meets it, the rest of issue 14's list: exit codes (0 done, 1 a run or data
// error, 2 a usage error, for every subcommand); a run refused before its first step still leaves
// its ledger line; `kiln export-images` into a folder holding another export compares the request
// with the marker; a --image-size schedule cut short by --epochs warns; the help and error texts
// that misled (--augment's default, resnet34_small, the --val class difference, the --normalize
// that `kiln data` suggests). Tiny data: npy 1x8x8 and JPEG folders of 16 px.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "support/cli/image_folder.h"
#include "support/cli/run_kiln.h"
#include "support/shell.h"

using namespace kiln_test;
namespace fs = std::filesystem;

namespace {

const std::string& npy_dir() {
  static const std::string d = [] {
    const std::string p = cli_temp_dir("faults_npy");
    make_npy_folder(p, 16, 1, 8, 2);
    return p;
  }();
  return d;
}

std::string small_train(const std::string& out, const std::string& sizes = "--epochs 1 --batch 8") {
  return "train --model small_cnn --data " + npy_dir() + " " + sizes + " --threads 1 --device cpu --out " + out;
}

int count_files(const std::string& dir, const std::string& ext) {
  int n = 0;
  std::error_code ec;
  for (auto& e : fs::recursive_directory_iterator(dir, ec))
    if (e.path().extension() == ext) ++n;
  return n;
}

}  // namespace

TEST_CASE("cli exit codes: 0 done, 1 a run or data error, 2 a usage error, for every subcommand") {
  const std::string out = cli_temp_dir("faults_exit");
  const std::string d = npy_dir();
  struct Case {
    std::string args;
    int status;
  };
  const std::vector<Case> cases = {
      {"", 2},                                     // no subcommand
      {"frobnicate", 2},                           // unknown subcommand
      {"--help", 0},
      {"train --help", 0},
      {"train --model small_cnn", 2},              // --data missing (CLI11: 106)
      {"train --model small_cnn --data " + d + " --bogus", 2},  // unknown flag (CLI11: 109)
      {"train --model small_cnn --data " + d + " --lr 0", 2},   // a range (CLI11: 105)
      {"train --model small_cnn --data " + d + " --optimizer adam", 2},
      {"train --model small_cnn --data " + d + " --batch x", 2},
      {"train --model small_cnn --data " + d + " --checkpoint-every 5min --out " + out, 2},  // checked after parsing
      {"train --model small_cnn --data " + d + " --schedule wobbly --out " + out, 2},
      {"train --model small_cnn --data " + d + " --normalize 0:0 --out " + out, 2},
      {"train --model nosuch --data " + d + " --out " + out, 2},
      {"train --model small_cnn --data " + d + " --batch 2 --accum 4 --out " + out, 2},
      {"train --model small_cnn --data " + d + " --limit 0 --out " + out, 2},
      {"train --model small_cnn --data /nonexistent/kiln --out " + out, 1},  // data error
      {"predict --model small_cnn --data " + d, 2},  // --weights and --out missing
      {"predict --model small_cnn --weights /nonexistent.safetensors --data " + d + " --out " + out + "/p.csv", 2},
      {"mem --model small_cnn --batch 2 --image-size 8 --checkpoint x", 2},
      {"mem --model small_cnn --batch 0 --image-size 8", 2},
      {"mem --model small_cnn --batch 2 --image-size 8", 0},
      {"data", 2},
      {"data /nonexistent/kiln", 1},
      {"export-images --data " + d, 2},  // --out missing
      {"export-images --data /nonexistent/kiln --out " + out + "/x", 1},
      {"runs " + out + " --json --csv", 2},
      {"runs /nonexistent/kiln/runs.jsonl", 1},
      {"report " + out, 2},  // -o missing
      {"devices --bogus", 2},
      {"devices", 0},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args);
    const CliRun r = run_kiln(c.args);
    CAPTURE(r.output);
    CHECK(r.status == c.status);
    if (c.status != 0) CHECK(contains(r.output, "kiln: error: "));
  }
}

TEST_CASE("cli refused run: a run stopped before its first step still appends its ledger line") {
  const std::string out = cli_temp_dir("faults_refused");  // exists: a usage error there is recorded too
  const std::string ledger = out + "/runs.jsonl";
  struct Case {
    std::string extra, error;
    int status;
  };
  const std::vector<Case> cases = {
      {"--checkpoint-every 5min", "--checkpoint-every", 2},                   // bad flag after parsing
      {"--accum 16", "--accum 16 is larger than --batch 8", 2},               // flags that contradict
      {"--save " + out + "/no/such/w.safetensors", "--save ", 1},             // unwritable output
      {"--device-memory 1M --optimizer adamw --momentum 0.9", "memory: the run's plan", 1},  // ~1.5 MiB: does not fit
  };
  size_t lines = 0;
  for (const Case& c : cases) {
    CAPTURE(c.extra);
    const CliRun r = run_kiln(small_train(out) + " " + c.extra);
    CAPTURE(r.output);
    CHECK(r.status == c.status);
    const std::vector<nlohmann::json> ends = ledger_end_records(ledger);
    REQUIRE(ends.size() == ++lines);
    const nlohmann::json& j = ends.back();
    CHECK(j["status"] == "refused");
    CHECK(contains(j.value("error", ""), c.error));
    CHECK(j["config"]["model"] == "small_cnn");
    CHECK(j["steps"] == 0);
  }
  // A --resume that contradicts the flags: refused, recorded.
  const std::string first = cli_temp_dir("faults_refused_state");
  REQUIRE(run_kiln(small_train(first)).status == 0);
  const CliRun r = run_kiln(small_train(out, "--epochs 2 --batch 4") + " --resume " + first + "/checkpoint.safetensors");
  CAPTURE(r.output);
  CHECK(r.status == 1);
  const std::vector<nlohmann::json> ends = ledger_end_records(ledger);
  REQUIRE(ends.size() == ++lines);
  CHECK(ends.back()["status"] == "refused");
  CHECK(contains(ends.back().value("error", ""), "was saved with other settings: batch"));
  // kiln runs lists them.
  const CliRun runs = run_kiln("runs " + out);
  CHECK(runs.status == 0);
  CHECK(count_of(runs.output, "\nrefused ") == lines);  // "refused RUN: error" under the table
  // No --out folder: nothing is created for a refused run.
  const std::string missing = out + "/not_there";
  CHECK(run_kiln(small_train(missing) + " --checkpoint-every 5min").status == 2);
  CHECK_FALSE(fs::exists(missing));
}

TEST_CASE("cli export-images: another data set, split or quality is exported again or refused, never skipped") {
  const std::string root = cli_temp_dir("faults_export");
  const std::string a = root + "/a", b = root + "/b", out = root + "/jpg";
  fs::create_directories(a);
  fs::create_directories(b);
  make_npy_folder(a, 12, 1, 8, 3);
  make_npy_folder(b, 6, 1, 8, 2);
  auto exp = [&](const std::string& args) { return run_kiln("export-images --out " + out + " " + args); };
  CliRun r = exp("--data " + a);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(count_files(out + "/train", ".jpg") == 12);
  r = exp("--data " + a);
  CHECK(r.status == 0);
  CHECK_MESSAGE(contains(r.output, "already holds a complete export"), r.output);
  // Other data: exported again, the old images gone (12 -> 6, class folder 2 gone).
  r = exp("--data " + b);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK_MESSAGE(contains(r.output, "held an export of other settings (--data " + fs::canonical(a).string() +
                                       " there, " + fs::canonical(b).string() + " asked); exported again"),
                r.output);
  CHECK(count_files(out + "/train", ".jpg") == 6);
  CHECK_FALSE(fs::exists(out + "/train/2"));
  // Another quality.
  r = exp("--data " + b + " --quality 50");
  CHECK_MESSAGE(contains(r.output, "(--quality 95 there, 50 asked); exported again"), r.output);
  // Another split (--val): test/ appears.
  r = exp("--data " + b + " --quality 50 --val " + a);
  CHECK_MESSAGE(contains(r.output, "(--val (none) there, " + fs::canonical(a).string() + " asked)"), r.output);
  CHECK(count_files(out + "/test", ".jpg") == 12);
  // The same folder, its files changed: exported again.
  make_npy_folder(b, 7, 1, 8, 2);
  r = exp("--data " + b + " --quality 50 --val " + a);
  CHECK_MESSAGE(contains(r.output, "its files changed since"), r.output);
  CHECK(count_files(out + "/train", ".jpg") == 7);
  // A file kiln did not write: refused in one line naming the difference and the file; nothing written.
  std::ofstream(out + "/notes.txt") << "mine";
  const std::string marker_before = read_text(out + "/.kiln_export");
  r = exp("--data " + a);
  CHECK(r.status == 1);
  CHECK_MESSAGE(contains(r.output, "holds an export of other settings (--data "), r.output);
  CHECK(contains(r.output, "--quality 50 there, 95 asked"));
  CHECK(contains(r.output, out + "/notes.txt"));
  CHECK(read_text(out + "/.kiln_export") == marker_before);
  CHECK(count_files(out + "/train", ".jpg") == 7);
  CHECK(fs::exists(out + "/notes.txt"));
  // --force writes it over them (the user's file stays).
  r = exp("--data " + a + " --force");
  CHECK_MESSAGE(r.status == 0, r.output);
  CHECK(fs::exists(out + "/notes.txt"));
  // A marker of an older kiln (plain text): exported again.
  const std::string old = root + "/old";
  REQUIRE(run_kiln("export-images --data " + a + " --out " + old).status == 0);
  std::ofstream(old + "/.kiln_export") << "kiln export-images of " << a << ": 12 train, 0 test images\n";
  r = run_kiln("export-images --data " + a + " --out " + old);
  CHECK_MESSAGE(contains(r.output, "does not record the data, split and quality"), r.output);
  CHECK(contains(read_text(old + "/.kiln_export"), "\"quality\": 95"));
}

TEST_CASE("cli --image-size schedule cut short by --epochs: a warning, and the sizes actually used") {
  const std::string root = cli_temp_dir("faults_sched");
  make_image_folder(root, 2, 4, 16, 1, false);
  const std::string base = "train --model resnet18_small --data " + root + " --channels 1 --batch 8 --threads 1 "
                           "--device cpu --out " + root + "/out ";
  CliRun r = run_kiln(base + "--image-size 16:5,24 --epochs 2");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(contains(r.output, "warning: --image-size 16:5,24 never reaches 24 within --epochs 2: 16 for epochs 1-2"));
  CHECK(contains(r.output, "samples (1x16x16)"));
  CHECK(contains(r.output, "image size 16 for epochs 1-2"));
  CHECK_FALSE(contains(r.output, "progressive resizing: 16:5,24"));
  r = run_kiln(base + "--image-size 12:1,16 --epochs 2");  // reaches its last size: no warning
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK_FALSE(contains(r.output, "never reaches"));
  CHECK(contains(r.output, "progressive resizing: 12:1,16"));
}

TEST_CASE("cli help and errors that misled: --augment's default, resnet34_small, --val classes, kiln data's --normalize") {
  const CliRun help = run_kiln("train --help");
  REQUIRE(help.status == 0);
  CHECK(contains(help.output, "resnet34_small"));
  CHECK(contains(run_kiln("mem --help").output, "resnet34_small"));
  CHECK(contains(run_kiln("predict --help").output, "resnet34_small"));
  const size_t at = help.output.find("--augment");
  REQUIRE(at != std::string::npos);
  const std::string augment_line = help.output.substr(at, help.output.find('\n', at) - at);
  CAPTURE(augment_line);
  CHECK(contains(augment_line, "--augment TEXT "));
  CHECK_FALSE(contains(augment_line, "=rrc"));  // was "--augment TEXT=rrc", as if rrc were the default
  CHECK(contains(augment_line, "none (default)"));

  // --val with other classes: each side's classes named.
  const std::string root = cli_temp_dir("faults_val");
  make_image_folder(root + "/a", 3, 2, 16, 1, false);
  make_image_folder(root + "/b", 2, 2, 16, 1, false);
  fs::rename(root + "/b/train/class1", root + "/b/train/dog");
  const CliRun val = run_kiln("train --model small_cnn --data " + root + "/a/train --val " + root +
                              "/b/train --channels 1 --epochs 1 --threads 1 --out " + root + "/out");
  CHECK(val.status == 1);
  CHECK_MESSAGE(contains(val.output, "train has 3 (class0, class1, class2), --val has 2 (class0, dog); only in "
                                     "train: class1, class2; only in --val: dog"),
                val.output);

  // kiln data on unreadable files suggests a --normalize train accepts; on constant images, std 1.
  const std::string junk = root + "/junk";
  for (const char* cls : {"x", "y"}) {
    fs::create_directories(junk + "/" + cls);
    for (int i = 0; i < 2; ++i) std::ofstream(junk + "/" + cls + "/" + std::to_string(i) + ".jpg") << "not a jpeg";
  }
  const std::string flat = root + "/flat";
  for (int k = 0; k < 2; ++k) {
    fs::create_directories(flat + "/c" + std::to_string(k));
    kiln::Image im;
    im.w = im.h = 16;
    im.c = 3;
    im.px.assign(16 * 16 * 3, 128);
    for (int i = 0; i < 3; ++i) kiln::write_jpeg(flat + "/c" + std::to_string(k) + "/" + std::to_string(i) + ".jpg", im, 95);
  }
  const std::regex suggested(R"(\n  --normalize ([^ \n]+))");
  for (const std::string& folder : {junk, flat}) {
    CAPTURE(folder);
    const CliRun d = run_kiln("data " + folder + " --out ''");
    CAPTURE(d.output);
    CHECK(d.status == 0);
    CHECK_FALSE(contains(d.output, "0,0,0:0,0,0"));
    std::smatch m;
    REQUIRE(std::regex_search(d.output, m, suggested));
    const CliRun t = run_kiln("train --model small_cnn --data " + flat + " --normalize " + m[1].str() +
                              " --epochs 1 --batch 6 --threads 1 --device cpu --out " + root + "/flat_out");
    CHECK_MESSAGE(t.status == 0, t.output);
  }
  CHECK(contains(run_kiln("data " + junk + " --out ''").output, "no readable image"));
  CHECK(contains(run_kiln("data " + flat + " --out ''").output, "0.5020,0.5020,0.5020:1.0000,1.0000,1.0000"));
}

TEST_CASE("cli memory on an image folder: the loader's workers never allocate, the data tag and the run are planned exactly") {
  // The workers decode into host buffers of their own; each batch is copied into the allocator on the
  // training thread as the previous one is released, so the data tag holds one batch (x, y) at any --prefetch
  // and --workers, and the whole run's peaks are the plan's to the byte.
  const std::string root = cli_temp_dir("faults_mem_images");
  make_image_folder(root, 2, 16, 16, 1, false);
  for (int prefetch : {1, 3}) {
    CAPTURE(prefetch);
    const std::string out = root + "/out" + std::to_string(prefetch);
    const CliRun r = run_kiln("train --model small_cnn --data " + root + "/train --channels 1 --image-size 16 "
                              "--epochs 1 --batch 4 --workers 2 --prefetch " + std::to_string(prefetch) +
                              " --threads 1 --device cpu --out " + out);
    REQUIRE_MESSAGE(r.status == 0, r.output);
    const nlohmann::json run = last_ledger_line(out + "/runs.jsonl");
    const nlohmann::json& m = run["memory"];
    const int64_t data = m["predicted"]["input_data"];
    CHECK(data == 4096 + 512);  // x (4, 1, 16, 16) f32, y (4) i64: 32 B in the allocator's 512-B rounding
    REQUIRE(m["measured_epochs"].size() == 1);
    CHECK(m["measured_epochs"][0]["measured_tag_peak"]["data"] == data);
    CHECK(run["peak_allocated"] == run["plan"]["peak_allocated"]);
    CHECK(run["peak_reserved"] == run["plan"]["peak_reserved"]);
  }
}

TEST_CASE("cli new user: predict at another image size names both sizes, and a folder with train/ alone trains on it") {
  const std::string root = cli_temp_dir("faults_predict_size");
  make_image_folder(root, 2, 4, 16, 1, false);
  const std::string w = root + "/w.safetensors";
  const CliRun t = run_kiln("train --model small_cnn --data " + root + "/train --channels 1 --image-size 16 "
                            "--epochs 1 --batch 8 --threads 1 --device cpu --out " + root + "/out --save " + w);
  REQUIRE_MESSAGE(t.status == 0, t.output);
  const CliRun p = run_kiln("predict --model small_cnn --weights " + w + " --data " + root + "/val --image-size 24 "
                            "--threads 1 --out " + root + "/p.csv");
  // The weights record their image size: the flag contradicts it (one line naming both sizes) ...
  CHECK(p.status == 1);
  CHECK_MESSAGE(contains(p.output, "--image-size 24 (trained at 16)"), p.output);
  // ... and forced, the model's layers cannot take 24 px images: said in those words, not as a shape mismatch.
  const CliRun f = run_kiln("predict --model small_cnn --weights " + w + " --data " + root + "/val --image-size 24 "
                            "--force --threads 1 --out " + root + "/p.csv");
  CHECK(f.status == 1);
  CHECK_MESSAGE(contains(f.output, "was trained on 16 px images and small_cnn's layers are sized for them, but the "
                                   "data is 24 px: pass --image-size 16"),
                f.output);
  CHECK(run_kiln("predict --model small_cnn --weights " + w + " --data " + root + "/val --threads 1 --out " + root +
                 "/p.csv").status == 0);
  // train/ without val/ or test/: its classes, not one class named "train".
  fs::remove_all(root + "/val");
  const CliRun only = run_kiln("train --model small_cnn --data " + root + " --channels 1 --image-size 16 --epochs 1 "
                               "--batch 8 --threads 1 --device cpu --out " + root + "/out2");
  CHECK_MESSAGE(only.status == 0, only.output);
  CHECK(contains(only.output, "8 samples"));
  CHECK(contains(only.output, "splits: train/ (no val/ or test/ beside it"));
  CHECK(contains(only.output, "2 classes"));
}
