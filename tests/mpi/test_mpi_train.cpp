// Data-parallel training under mpirun (label mpi: real processes, OpenMPI over shared memory; kept out of
// the sanitizer run, which runs the unit and fuzz labels only). On a small npy data set (49 samples,
// 1x8x8, 3 classes) and small_cnn's layout without BatchNorm and dropout (per-rank state and per-rank
// draws without --sync-bn and keyed dropout), 2 ranks at --batch 8 must give the
// weights of 1 process at --batch 16: max |difference| / max |value| <= 1e-5 per tensor. The epoch's
// last global batch has 1 row, so rank 1 takes no row there (it still all-reduces zeros). A control run
// at --batch 8 in one process differs by far more, so the comparison can fail; and 2 ranks are bit for bit
// one process at --batch 16 --accum 2 (the same sums in the same order), also on an image folder with a
// bad file (the trainer cuts the decoded global batch). Only rank 0 prints the epochs and writes the ledger
// and the state file; `mpirun -n 1` is byte-identical to no launcher; a failing rank aborts the job with
// one message naming it; a 2-rank state resumes mid-epoch (2 ranks, or 1 process at the same global batch)
// to the bytes of an uninterrupted run.
// small_cnn itself (BatchNorm and dropout) trains the same weights and buffers on 2 ranks with --sync-bn (also
// with --accum 2: each micro-batch is a share of one process's) and
// dropout keyed by global rows (rng_rows.h). Skipped, with a message, in a build without MPI or where mpirun
// is missing.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/core/devices.h"
#include "engine/dist/process_group.h"
#include "engine/io/safetensors.h"
#include "support/cli/image_folder.h"
#include "support/cli/run_kiln.h"
#include "support/cli/segment_data.h"
#include "support/mpi_run.h"

using kiln_test::contains;
using kiln_test::kMpiEnv;
using kiln_test::run_kiln;
namespace fs = std::filesystem;

namespace {

// small_cnn's layout (conv 32, pool, conv 64, pool, fc 128, fc K) without batch_norm and dropout.
const char* kNet = R"json({
  "format": "kiln-model-1",
  "description": "small_cnn without BatchNorm and dropout (data-parallel equality test)",
  "layers": [
    {"name": "conv1", "type": "conv2d", "out_channels": 32, "kernel": 3, "padding": 1},
    {"name": "relu1", "type": "relu"},
    {"name": "pool1", "type": "max_pool", "kernel": 2},
    {"name": "conv2", "type": "conv2d", "out_channels": 64, "kernel": 3, "padding": 1},
    {"name": "relu2", "type": "relu"},
    {"name": "pool2", "type": "max_pool", "kernel": 2},
    {"name": "flatten", "type": "flatten"},
    {"name": "fc1", "type": "linear", "out_features": 128},
    {"name": "relu3", "type": "relu"},
    {"name": "fc2", "type": "linear", "out_features": "num_classes"}
  ]
}
)json";


struct Setup {
  std::string dir, data, net;
};
const Setup& setup() {
  static const Setup s = [] {
    Setup x;
    x.dir = kiln_test::cli_temp_dir("mpi_train");
    x.data = x.dir + "/data";
    fs::create_directories(x.data);
    kiln_test::make_npy_folder(x.data, 49, 1, 8, 3);
    x.net = x.dir + "/net.json";
    std::ofstream(x.net) << kNet;
    return x;
  }();
  return s;
}

std::string train_args(const std::string& out, int64_t batch, const std::string& extra, int epochs = 8) {
  const Setup& s = setup();
  return "train --model " + s.net + " --data " + s.data + " --epochs " + std::to_string(epochs) + " --batch " + std::to_string(batch) +
         " --seed 11 --threads 1 --device cpu --out " + out + " --save " + out + "/w.safetensors " + extra;
}

// `mpirun -n RANKS kiln ARGS`; prefix: environment assignments and/or a wrapper such as "timeout 60".
kiln_test::CliRun run_mpi(int ranks, const std::string& args, const std::string& prefix = "") {
  const std::string cmd = std::string(kMpiEnv) + " " + prefix + " mpirun -n " + std::to_string(ranks) + " " +
                          std::string(KILN_BINARY_DIR) + "/kiln " + args + " 2>&1";
  return kiln_test::run_command(cmd);
}

// The largest over tensors of max |a - b| / max |a| (f32 tensors; names and shapes must match).
double max_relative_difference(const std::string& a, const std::string& b, std::string* worst) {
  const kiln::SafetensorsFile fa = kiln::read_safetensors(a), fb = kiln::read_safetensors(b);
  REQUIRE(fa.tensors.size() == fb.tensors.size());
  double out = 0;
  for (size_t i = 0; i < fa.tensors.size(); ++i) {
    const kiln::HostArray &x = fa.tensors[i].array, &y = fb.tensors[i].array;
    REQUIRE(fa.tensors[i].name == fb.tensors[i].name);
    REQUIRE(x.shape == y.shape);
    if (x.dtype != kiln::DType::f32) continue;
    const size_t n = x.bytes.size() / 4;
    double diff = 0, scale = 0;
    for (size_t k = 0; k < n; ++k) {
      diff = std::max(diff, (double)std::fabs(x.data<float>()[k] - y.data<float>()[k]));
      scale = std::max(scale, (double)std::fabs(x.data<float>()[k]));
    }
    const double rel = diff / std::max(scale, 1e-30);
    if (rel >= out) {
      out = rel;
      if (worst) *worst = fa.tensors[i].name;
    }
  }
  return out;
}

int count(const std::string& s, const std::string& sub) {
  int n = 0;
  for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + 1)) ++n;
  return n;
}

void check_equal_to_one_process(const std::string& name, const std::string& extra) {
  const Setup& s = setup();
  const std::string one = s.dir + "/" + name + "_one", two = s.dir + "/" + name + "_two";
  auto r1 = run_kiln(train_args(one, 16, extra));
  REQUIRE_MESSAGE(r1.status == 0, r1.output);
  auto r2 = run_mpi(2, train_args(two, 8, extra));
  REQUIRE_MESSAGE(r2.status == 0, r2.output);
  CHECK(contains(r2.output, "data-parallel: 2 ranks (mpi), batch 8 per rank, 16 per step"));
  std::string worst;
  const double rel = max_relative_difference(one + "/w.safetensors", two + "/w.safetensors", &worst);
  MESSAGE(name, ": 2 ranks x batch 8 vs 1 process x batch 16 after 32 steps: max relative difference ", rel, " (",
          worst, ")");
  CHECK(rel <= 1e-5);
  // Rank 0 alone prints and writes: one line per epoch, one start and one end record in the ledger.
  CHECK(count(r2.output, "epoch 8/8  train loss") == 1);
  CHECK(count(r2.output, "data-parallel: 2 ranks") == 1);
  std::ifstream ledger(two + "/runs.jsonl");
  std::string line;
  int starts = 0, ends = 0;
  while (std::getline(ledger, line)) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    starts += j.value("record", "") == "start";
    ends += j.value("record", "") == "end";
    if (j.value("record", "") == "end") {
      CHECK(j.value("ranks", 0) == 2);
      CHECK(j.value("status", "") == "ok");
      CHECK(j.value("steps", 0) == 32);  // 4 global steps (16, 16, 16, 1 rows) x 8 epochs
    }
  }
  CHECK(starts == 1);
  CHECK(ends == 1);
  CHECK(fs::exists(two + "/checkpoint.safetensors"));
}

}  // namespace

TEST_CASE("mpi: 2 ranks at batch 8 train the weights of 1 process at batch 16 (sgd, momentum)") {
  if (!kiln_test::mpi_can_run()) return;
  check_equal_to_one_process("sgd", "--optimizer sgd --lr 0.05 --momentum 0.9");
  // With accumulation and clipping on both sides (micro-batches of 4 per rank, of 8 in one process).
  check_equal_to_one_process("sgd_accum_clip", "--optimizer sgd --lr 0.05 --momentum 0.9 --accum 2 --clip 0.5");
  // The control: one process at batch 8 (other steps) is far from the batch-16 weights, so the
  // 1e-5 above is a real test.
  const Setup& s = setup();
  auto r = run_kiln(train_args(s.dir + "/sgd_control", 8, "--optimizer sgd --lr 0.05 --momentum 0.9"));
  REQUIRE_MESSAGE(r.status == 0, r.output);
  const double rel = max_relative_difference(s.dir + "/sgd_one/w.safetensors", s.dir + "/sgd_control/w.safetensors",
                                             nullptr);
  MESSAGE("control: 1 process at batch 8 vs batch 16: max relative difference ", rel);
  CHECK(rel > 1e-3);
}

TEST_CASE("mpi: 2 ranks at batch 8 give bit for bit 1 process at batch 16 in 2 micro-batches (adamw, --clip, 5 overlapped buckets)") {
  // Rank r's gradient is that of micro-batch r of the one-process step (same rows, same weight 8/16),
  // and their sum is added in the same order, so the weights are the same bits; clipping sees the
  // global gradient. (Against --batch 16 without --accum, AdamW at this LR differs by ~4e-5 relative,
  // as much as --accum 2 differs from no --accum in one process: m / sqrt(v) amplifies the rounding
  // of near-zero gradients. Exactness against accumulation is the stronger check.)
  if (!kiln_test::mpi_can_run()) return;
  const Setup& s = setup();
  // --bucket-mb 0.05: 5 buckets (fc2 and fc1.bias, fc1.weight, conv2.bias, conv2.weight, conv1), each
  // all-reduced on the communication thread as soon as backward completes it.
  const std::string extra = "--optimizer adamw --lr 0.003 --clip 0.5";
  auto r1 = run_kiln(train_args(s.dir + "/adamw_accum", 16, extra + " --accum 2"));
  REQUIRE_MESSAGE(r1.status == 0, r1.output);
  auto r2 = run_mpi(2, train_args(s.dir + "/adamw_two", 8, extra + " --bucket-mb 0.05"));
  REQUIRE_MESSAGE(r2.status == 0, r2.output);
  CHECK(contains(r2.output, "gradients all-reduced in 5 buckets of up to 0.05 MiB, during backward"));
  CHECK(count(r2.output, "data-parallel: 5 of 5 buckets started their all-reduce during the last backward") == 8);
  const kiln::SafetensorsFile fa = kiln::read_safetensors(s.dir + "/adamw_accum/w.safetensors"),
                              fb = kiln::read_safetensors(s.dir + "/adamw_two/w.safetensors");
  REQUIRE(fa.tensors.size() == fb.tensors.size());
  for (size_t i = 0; i < fa.tensors.size(); ++i)
    CHECK_MESSAGE(fa.tensors[i].array.bytes == fb.tensors[i].array.bytes, fa.tensors[i].name);
}

TEST_CASE("mpi: mpirun -n 1 trains the bytes of a run without a launcher") {
  if (!kiln_test::mpi_can_run()) return;
  const Setup& s = setup();
  auto a = run_kiln(train_args(s.dir + "/plain", 8, "--optimizer sgd --lr 0.05", 2));
  REQUIRE_MESSAGE(a.status == 0, a.output);
  auto b = run_mpi(1, train_args(s.dir + "/mpi1", 8, "--optimizer sgd --lr 0.05", 2));
  REQUIRE_MESSAGE(b.status == 0, b.output);
  CHECK_FALSE(contains(b.output, "data-parallel"));
  const kiln::SafetensorsFile fa = kiln::read_safetensors(s.dir + "/plain/w.safetensors"),
                              fb = kiln::read_safetensors(s.dir + "/mpi1/w.safetensors");
  REQUIRE(fa.tensors.size() == fb.tensors.size());
  for (size_t i = 0; i < fa.tensors.size(); ++i) CHECK_MESSAGE(fa.tensors[i].array.bytes == fb.tensors[i].array.bytes, fa.tensors[i].name);
}

TEST_CASE("mpi: a rank that fails ends every rank with one message naming it") {
  if (!kiln_test::mpi_can_run()) return;
  const Setup& s = setup();
  // Rank 1 throws before step 3 (tools/train_loop.cpp's test hook) while rank 0 waits in the step's
  // first all-reduce: rank 1 names itself and aborts the job; nothing hangs (timeout: 60 s).
  auto r = run_mpi(2, train_args(s.dir + "/fail", 8, "--optimizer sgd --lr 0.05"),
                   "KILN_TEST_FAIL_RANK=1:3 timeout 60");
  CHECK(r.status != 0);
  CHECK(r.status != 124);  // not the timeout
  CHECK(contains(r.output, "kiln: error: rank 1 of 2: KILN_TEST_FAIL_RANK: rank 1 fails before step 3"));
  CHECK_FALSE(contains(r.output, "epoch 1/8  train loss"));
}

TEST_CASE("mpi: a 2-rank run resumed mid-epoch, by 2 ranks or by 1 process at the same global batch, ends on the bytes of an uninterrupted run") {
  if (!kiln_test::mpi_can_run()) return;
  const Setup& s = setup();
  const std::string flags = "--optimizer sgd --lr 0.05 --momentum 0.9 --schedule cosine";
  auto ref = run_mpi(2, train_args(s.dir + "/resume_ref", 8, flags, 4));
  REQUIRE_MESSAGE(ref.status == 0, ref.output);
  // Rank 0 fails before step 8; the state file of step 6 (epoch 2, step 2 of 4) is left.
  auto cut = run_mpi(2, train_args(s.dir + "/resume_cut", 8, flags + " --checkpoint-every 6steps", 4),
                     "KILN_TEST_FAIL_RANK=0:8 timeout 60");
  REQUIRE(cut.status != 0);
  const std::string state = s.dir + "/resume_cut/checkpoint.safetensors";
  REQUIRE(fs::exists(state));
  auto same = run_mpi(2, train_args(s.dir + "/resume_two", 8, flags + " --resume " + state, 4));
  REQUIRE_MESSAGE(same.status == 0, same.output);
  CHECK(contains(same.output, "at epoch 1 + 2/4 steps, step 6"));
  // One process at --batch 16 keeps the global batch (no "batch:" difference); with --accum 2 (a flag that
  // differs, so --resume-override) it computes the ranks' gradients as micro-batches, bit for bit.
  auto refused = run_kiln(train_args(s.dir + "/resume_refused", 8, flags + " --resume " + state, 4));
  CHECK(refused.status != 0);
  CHECK(contains(refused.output, "batch: saved 8 x 2 ranks, now 8"));
  auto one = run_kiln(train_args(s.dir + "/resume_one", 16, flags + " --accum 2 --resume-override --resume " + state, 4));
  REQUIRE_MESSAGE(one.status == 0, one.output);
  CHECK_FALSE(contains(one.output, "--resume-override: batch"));
  CHECK(contains(one.output, "--resume-override: accum: saved 1, now 2"));
  CHECK(contains(one.output, "at epoch 1 + 2/4 steps, step 6"));
  for (const char* run : {"resume_two", "resume_one"}) {
    const kiln::SafetensorsFile fa = kiln::read_safetensors(s.dir + "/resume_ref/w.safetensors"),
                                fb = kiln::read_safetensors(s.dir + "/" + run + "/w.safetensors");
    REQUIRE(fa.tensors.size() == fb.tensors.size());
    for (size_t i = 0; i < fa.tensors.size(); ++i)
      CHECK_MESSAGE(fa.tensors[i].array.bytes == fb.tensors[i].array.bytes, run, ": ", fa.tensors[i].name);
  }
}

TEST_CASE("mpi: an image folder: each rank decodes its shard, bit for bit 1 process with --accum 2, and with a bad JPEG within 1e-5") {
  // Image sources shard (DataSource::shard): rank r decodes only its rows of each global batch, with the
  // augmentation draws of their places in the epoch, so without bad files the ranks' rows are --accum 2's
  // micro-batches in one process: the same bytes. A bad file leaves its rank's share one row short, while
  // one process splits the good rows 8 / 7: the same global mean gradient, summed in another order, so
  // within 1e-5 (SGD). The rank that meets the bad file reports it (rank 0 in the log, another on stderr
  // with its rank); the count is summed over the ranks.
  if (!kiln_test::mpi_can_run()) return;
  const Setup& s = setup();
  auto args = [&](const std::string& root, const std::string& out, int batch, const std::string& extra) {
    return "train --model " + s.net + " --data " + root + " --channels 1 --image-size 8 --epochs 3 --batch " +
           std::to_string(batch) + " --augment rrc --seed 4 --threads 1 --workers 1 --device cpu --out " + out +
           " --save " + out + "/w.safetensors " + extra;
  };
  {
    const std::string root = s.dir + "/images_good";
    kiln_test::make_image_folder(root, 3, 9, 16, 1, false);  // 27 training images: batches of 16 and 11
    const std::string opt = "--optimizer adamw --lr 0.003";
    auto one = run_kiln(args(root, s.dir + "/img_one", 16, opt + " --accum 2"));
    REQUIRE_MESSAGE(one.status == 0, one.output);
    auto two = run_mpi(2, args(root, s.dir + "/img_two", 8, opt));
    REQUIRE_MESSAGE(two.status == 0, two.output);
    CHECK(kiln_test::count_of(two.output, "epoch 3/3  train loss") == 1);
    const kiln::SafetensorsFile fa = kiln::read_safetensors(s.dir + "/img_one/w.safetensors"),
                                fb = kiln::read_safetensors(s.dir + "/img_two/w.safetensors");
    REQUIRE(fa.tensors.size() == fb.tensors.size());
    for (size_t i = 0; i < fa.tensors.size(); ++i)
      CHECK_MESSAGE(fa.tensors[i].array.bytes == fb.tensors[i].array.bytes, fa.tensors[i].name);
  }
  {
    const std::string root = s.dir + "/images_bad";
    kiln_test::make_image_folder(root, 3, 9, 16, 1, true);  // 27 good training images + 1 truncated
    const std::string opt = "--optimizer sgd --lr 0.05 --momentum 0.9";
    auto one = run_kiln(args(root, s.dir + "/bad_one", 16, opt + " --accum 2"));
    REQUIRE_MESSAGE(one.status == 0, one.output);
    auto two = run_mpi(2, args(root, s.dir + "/bad_two", 8, opt));
    REQUIRE_MESSAGE(two.status == 0, two.output);
    CHECK(kiln_test::count_of(one.output, "zz_truncated.jpg") >= 1);
    CHECK(kiln_test::count_of(two.output, "zz_truncated.jpg") >= 1);  // reported by the rank that decoded it
    CHECK(kiln_test::count_of(two.output, "summed over the ranks' shards") >= 1);
    std::string worst;
    const double rel =
        max_relative_difference(s.dir + "/bad_one/w.safetensors", s.dir + "/bad_two/w.safetensors", &worst);
    MESSAGE("image folder with a bad JPEG: 2 ranks x 8 vs 1 process x 16 --accum 2: max relative difference ", rel,
            " (", worst, ")");
    CHECK(rel <= 1e-5);
  }
}

TEST_CASE("mpi: segmentation masks shard: 2 ranks at batch 8 give 1 process at batch 16 --accum 2, and with --accum 2 each micro-batch's share") {
  // --task segment on a mask-array folder (per-pixel loss, the top row ignored): each rank gathers only
  // its rows (DataSource::shard), rank r's rows are one process's micro-batch r, so the sums are added
  // in the same order; with --accum 2 on the ranks too, each rank's micro-batch k is its share of one
  // process's micro-batch k.
  if (!kiln_test::mpi_can_run()) return;
  const Setup& s = setup();
  const std::string data = s.dir + "/seg_data";
  fs::create_directories(data);
  kiln_test::make_segment_npy_folder(data, 40, 16, 7);
  const std::string model = kiln_test::write_segment_model_file(s.dir, 16);
  auto args = [&](const std::string& out, int batch, const std::string& extra) {
    return "train --task segment --model " + model + " --data " + data + " --epochs 3 --batch " +
           std::to_string(batch) + " --optimizer sgd --lr 0.05 --momentum 0.9 --seed 3 --threads 1 --device cpu --out " +
           out + " --save " + out + "/w.safetensors " + extra;
  };
  for (const std::string& accum : {std::string("1"), std::string("2")}) {
    const std::string one = s.dir + "/seg_one" + accum, two = s.dir + "/seg_two" + accum;
    auto r1 = run_kiln(args(one, 16, "--accum " + std::to_string(2 * std::stoi(accum))));
    REQUIRE_MESSAGE(r1.status == 0, r1.output);
    auto r2 = run_mpi(2, args(two, 8, "--accum " + accum));
    REQUIRE_MESSAGE(r2.status == 0, r2.output);
    std::string worst;
    const double rel = max_relative_difference(one + "/w.safetensors", two + "/w.safetensors", &worst);
    MESSAGE("segmentation, 2 ranks x 8 --accum ", accum, " vs 1 process x 16 --accum ", 2 * std::stoi(accum),
            ": max relative difference ", rel, " (", worst, ")");
    CHECK(rel <= 1e-5);
  }
}

TEST_CASE("mpi: --amp: the ranks skip the same steps (found_inf of the summed gradients), bit for bit 1 process with --accum 2") {
  // Loss scale 1e12 with growth every 3 clean steps: the scaler skips 25 of the 32 steps. Each rank
  // checks the all-reduced gradients, so no rank takes a step the others skip.
  if (!kiln_test::mpi_can_run()) return;
  const Setup& s = setup();
  const std::string flags = "--optimizer sgd --lr 0.05 --momentum 0.9 --amp --amp-init-scale 1e12 --amp-growth-interval 3";
  auto one = run_kiln(train_args(s.dir + "/amp_one", 16, flags + " --accum 2"));
  REQUIRE_MESSAGE(one.status == 0, one.output);
  auto two = run_mpi(2, train_args(s.dir + "/amp_two", 8, flags));
  REQUIRE_MESSAGE(two.status == 0, two.output);
  CHECK(contains(one.output, "25 skipped steps"));
  CHECK(count(two.output, "amp: loss scale 119209, 25 skipped steps") == 1);  // rank 0's last epoch line
  const kiln::SafetensorsFile fa = kiln::read_safetensors(s.dir + "/amp_one/w.safetensors"),
                              fb = kiln::read_safetensors(s.dir + "/amp_two/w.safetensors");
  REQUIRE(fa.tensors.size() == fb.tensors.size());
  for (size_t i = 0; i < fa.tensors.size(); ++i)
    CHECK_MESSAGE(fa.tensors[i].array.bytes == fb.tensors[i].array.bytes, fa.tensors[i].name);
}

TEST_CASE("mpi: kiln train --nproc 2 starts the ranks itself: the weights of mpirun -n 2") {
  if (!kiln_test::mpi_can_run()) return;
  const Setup& s = setup();
  const std::string flags = "--optimizer sgd --lr 0.05 --momentum 0.9";
  auto a = run_mpi(2, train_args(s.dir + "/nproc_mpirun", 8, flags, 2));
  REQUIRE_MESSAGE(a.status == 0, a.output);
  auto b = run_kiln(train_args(s.dir + "/nproc_flag", 8, flags + " --nproc 2", 2), kMpiEnv);
  REQUIRE_MESSAGE(b.status == 0, b.output);
  CHECK(contains(b.output, "data-parallel: 2 ranks (mpi), batch 8 per rank, 16 per step"));
  const kiln::SafetensorsFile fa = kiln::read_safetensors(s.dir + "/nproc_mpirun/w.safetensors"),
                              fb = kiln::read_safetensors(s.dir + "/nproc_flag/w.safetensors");
  REQUIRE(fa.tensors.size() == fb.tensors.size());
  for (size_t i = 0; i < fa.tensors.size(); ++i)
    CHECK_MESSAGE(fa.tensors[i].array.bytes == fb.tensors[i].array.bytes, fa.tensors[i].name);
  // Under a launcher already: refused (a usage error, exit 2 on every rank).
  auto nested = run_mpi(1, train_args(s.dir + "/nproc_nested", 8, flags + " --nproc 2", 2));
  CHECK(nested.status == 2);
  CHECK(contains(nested.output, "--nproc: already one rank of an MPI launch"));
}

TEST_CASE("mpi: ranks started with other flags are refused at start-up, naming the flag") {
  if (!kiln_test::mpi_can_run()) return;
  const Setup& s = setup();
  // mpirun's MPMD form: rank 0 with --lr 0.05, rank 1 with --lr 0.1 (and its own --out, which may differ).
  const std::string kiln = std::string(KILN_BINARY_DIR) + "/kiln ";
  const std::string cmd = std::string(kMpiEnv) + " timeout 60 mpirun -n 1 " + kiln +
                          train_args(s.dir + "/flags_a", 8, "--optimizer sgd --lr 0.05", 2) + " : -n 1 " + kiln +
                          train_args(s.dir + "/flags_b", 8, "--optimizer sgd --lr 0.1", 2) + " 2>&1";
  const kiln_test::CliRun r = kiln_test::run_command(cmd);
  CHECK(r.status != 0);
  CHECK(r.status != 124);
  CHECK(contains(r.output, "data-parallel: this rank was started with other flags than rank 0: lr: rank 0 has 0.05, this rank 0.1"));
  CHECK_FALSE(contains(r.output, "epoch 1/2"));
}

TEST_CASE("mpi: --drop-last drops the short last global batch: 3 steps an epoch, bit for bit 1 process with --accum 2") {
  if (!kiln_test::mpi_can_run()) return;
  const Setup& s = setup();
  const std::string flags = "--optimizer sgd --lr 0.05 --momentum 0.9 --drop-last";
  auto one = run_kiln(train_args(s.dir + "/drop_one", 16, flags + " --accum 2", 4));
  REQUIRE_MESSAGE(one.status == 0, one.output);
  auto two = run_mpi(2, train_args(s.dir + "/drop_two", 8, flags, 4));
  REQUIRE_MESSAGE(two.status == 0, two.output);
  CHECK(contains(two.output, "3 steps/epoch"));  // 49 samples: 3 global batches of 16, the 1 left is dropped
  CHECK(kiln_test::last_ledger_line(s.dir + "/drop_two/runs.jsonl").value("steps", 0) == 12);
  const kiln::SafetensorsFile fa = kiln::read_safetensors(s.dir + "/drop_one/w.safetensors"),
                              fb = kiln::read_safetensors(s.dir + "/drop_two/w.safetensors");
  REQUIRE(fa.tensors.size() == fb.tensors.size());
  for (size_t i = 0; i < fa.tensors.size(); ++i)
    CHECK_MESSAGE(fa.tensors[i].array.bytes == fb.tensors[i].array.bytes, fa.tensors[i].name);
}

TEST_CASE("mpi: --sync-bn and dropout keyed by global rows: small_cnn, 2 ranks at batch 8 end on the weights and BatchNorm buffers of 1 process at batch 16") {
  // small_cnn has BatchNorm (bn1, bn2) and dropout (p 0.25): with --sync-bn every BatchNorm sees the
  // global batch's statistics (forward and backward) and each dropout row is drawn by its global row,
  // so the ranks compute one process's step. One epoch of 960 samples (60 steps of 16), and of 961 (a
  // 61st global batch of 1 row: rank 1 has no row and still joins every batch-norm reduction). On one
  // process --sync-bn is plain BatchNorm. A control run without --sync-bn (each rank's own statistics)
  // is far off, so the 1e-5 can fail. (LR 0.02: at 0.05 the ranks' f32 rounding of the conv gradients
  // grows to 9e-6 over the 60 steps, while one process whose LR is changed by 2e-7 relative moves by 2.4e-5:
  // that run is chaotic at the 1e-5 level, whatever computes it.)
  if (!kiln_test::mpi_can_run()) return;
  const Setup& s = setup();
  auto args = [&](const std::string& data, const std::string& out, int batch, const std::string& extra) {
    return "train --model small_cnn --data " + data + " --epochs 1 --batch " + std::to_string(batch) +
           " --optimizer sgd --lr 0.02 --momentum 0.9 --seed 11 --threads 1 --device cpu --out " + out + " --save " +
           out + "/w.safetensors " + extra;
  };
  for (int64_t n : {960, 961}) {
    const std::string dir = s.dir + "/syncbn" + std::to_string(n), data = dir + "/data";
    fs::create_directories(data);
    kiln_test::make_npy_folder(data, n, 1, 8, 3);
    auto one = run_kiln(args(data, dir + "/one", 16, "--sync-bn"));
    REQUIRE_MESSAGE(one.status == 0, one.output);
    auto two = run_mpi(2, args(data, dir + "/two", 8, "--sync-bn"));
    REQUIRE_MESSAGE(two.status == 0, two.output);
    CHECK(contains(two.output, "data-parallel: --sync-bn: BatchNorm statistics summed over the 2 ranks"));
    CHECK_FALSE(contains(two.output, "has BatchNorm; its statistics are each rank's own"));
    std::string worst;
    const double rel = max_relative_difference(dir + "/one/w.safetensors", dir + "/two/w.safetensors", &worst);
    MESSAGE("--sync-bn, ", n, " samples: 2 ranks x batch 8 vs 1 process x batch 16 after ", (n + 15) / 16,
            " steps: max relative difference ", rel, " (", worst, ")");
    CHECK(rel <= 1e-5);
    // every parameter and buffer was compared, the BatchNorm buffers included; the batch counters are equal
    const kiln::SafetensorsFile fa = kiln::read_safetensors(dir + "/one/w.safetensors"),
                                fb = kiln::read_safetensors(dir + "/two/w.safetensors");
    bool saw_running_var = false;
    for (size_t i = 0; i < fa.tensors.size(); ++i) {
      saw_running_var = saw_running_var || contains(fa.tensors[i].name, "bn2.running_var");
      if (fa.tensors[i].array.dtype != kiln::DType::f32)
        CHECK_MESSAGE(fa.tensors[i].array.bytes == fb.tensors[i].array.bytes, fa.tensors[i].name);
    }
    CHECK(saw_running_var);
    if (n == 960) {
      auto control = run_mpi(2, args(data, dir + "/control", 8, ""));
      REQUIRE_MESSAGE(control.status == 0, control.output);
      CHECK(contains(control.output, "has BatchNorm; its statistics are each rank's own"));
      const double off = max_relative_difference(dir + "/one/w.safetensors", dir + "/control/w.safetensors", nullptr);
      MESSAGE("control: 2 ranks without --sync-bn vs 1 process: max relative difference ", off);
      CHECK(off > 1e-3);
    }
  }
  // --sync-bn with --accum 2: a rank's micro-batch k is its share of one process's micro-batch k
  // (dist::shard_pieces), so each batch-norm reduction sees one process's micro-batch; 961 samples: the
  // last global batch of 1 row is one micro-batch, rank 1's share of it empty (it still joins). Fails
  // when a rank's micro-batches are its own rows cut in two (checked: 0.84 relative, bn2.running_var).
  for (int64_t n : {960, 961}) {
    const std::string dir = s.dir + "/syncbn" + std::to_string(n), data = dir + "/data";
    auto one = run_kiln(args(data, dir + "/one_accum", 16, "--sync-bn --accum 2"));
    REQUIRE_MESSAGE(one.status == 0, one.output);
    auto two = run_mpi(2, args(data, dir + "/two_accum", 8, "--sync-bn --accum 2"));
    REQUIRE_MESSAGE(two.status == 0, two.output);
    std::string worst;
    const double rel =
        max_relative_difference(dir + "/one_accum/w.safetensors", dir + "/two_accum/w.safetensors", &worst);
    MESSAGE("--sync-bn --accum 2, ", n, " samples: 2 ranks x batch 8 vs 1 process x batch 16: max relative difference ",
            rel, " (", worst, ")");
    CHECK(rel <= 1e-5);
  }
}

TEST_CASE("mpi: --batch-memory on 2 ranks: each rank's batch sized to the budget, the step's batch the ranks' shares, measured = predicted per rank") {
  // Images of 64, 96 and 128 px (resnet18): each rank searches its own batch per size bucket on the
  // meta device (its prediction counts the gradient buckets), a step plans that times 2 and each rank
  // decodes its share; every step's peak (rank 0's) stays within the budget and equals its prediction.
  if (!kiln_test::mpi_can_run()) return;
  const Setup& s = setup();
  const std::string root = s.dir + "/mixed", out = s.dir + "/mixed_out";
  uint32_t state = 5;
  int64_t images = 0;
  for (int k = 0; k < 2; ++k) {
    const fs::path dir = fs::path(root) / ("class" + std::to_string(k));
    fs::create_directories(dir);
    int i = 0;
    for (int size : {64, 96, 128})
      for (int n = 0; n < (size == 64 ? 15 : size == 96 ? 6 : 3); ++n, ++images)
        kiln::write_jpeg((dir / (std::to_string(i++) + ".jpg")).string(), kiln_test::class_image(k, 2, size, 3, &state),
                         90);
  }
  auto r = run_mpi(2, "train --model resnet18 --data " + root + " --batch-memory 150M --epochs 1 --optimizer sgd "
                      "--lr 0.05 --momentum 0.9 --seed 3 --threads 1 --workers 1 --device cpu --out " + out);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(contains(r.output, "the budget and batches are each rank's, 2 ranks per step"));
  CHECK(contains(r.output, "batches of each size bucket per rank by --batch-memory"));
  const nlohmann::json j = kiln_test::last_ledger_line(out + "/runs.jsonl");
  REQUIRE_MESSAGE(j.contains("batch_memory"), j.dump());
  const nlohmann::json& bm = j["batch_memory"];
  CHECK(bm["ranks"].get<int>() == 2);
  CHECK(bm["max_measured_minus_budget"].get<int64_t>() <= 0);
  CHECK(bm["steps_compared"].get<int64_t>() > 0);
  CHECK(std::abs(bm["measured_vs_predicted_max"].get<double>()) <= 0.02);
  CHECK(std::abs(bm["measured_vs_predicted_min"].get<double>()) <= 0.02);
  // The steps of the epoch: per bucket ceil(images / (2 x a rank's batch)); the samples per step are
  // global batches (2 x a rank's batch, or a bucket's short last one): they add up to the epoch.
  int64_t steps = 0, per_step_total = 0, steps_listed = 0;
  for (const nlohmann::json& b : bm["buckets"]) {
    const int64_t batch = b["batch"].get<int64_t>(), n = b["images"].get<int64_t>();
    CHECK(batch >= 1);
    steps += (n + 2 * batch - 1) / (2 * batch);
  }
  for (const auto& [samples, count] : bm["samples_per_step"].items()) {
    per_step_total += std::stoll(samples) * count.get<int64_t>();
    steps_listed += count.get<int64_t>();
  }
  CHECK(bm["steps"].get<int64_t>() == steps);
  CHECK(steps_listed == steps);
  CHECK(per_step_total == images);
}

TEST_CASE("mpi: 2 ranks on 2 GPUs (NCCL buckets during backward) train the weights of 1 process at batch 16 on one GPU") {
  // One process per GPU: `--device cuda` on rank r is cuda:r (tools/train_ranks.h's rank_device); the
  // gradient buckets are CUDA tensors summed by NCCL on its own stream, started during backward. Runs only
  // where two GPUs are visible (tools/gpu-check's "nccl 2 GPUs" row); NEVER RUN: no such machine yet.
  if (!kiln_test::mpi_can_run()) return;
  const size_t gpus = kiln::query_devices().gpus.size();
  if (gpus < 2) {
    MESSAGE("skipped: needs two GPUs (", gpus, " visible): multi-GPU data-parallel stays unverified");
    return;
  }
  const Setup& s = setup();
  auto args = [&](const std::string& out, int batch, const std::string& device) {
    return "train --model " + s.net + " --data " + s.data + " --epochs 8 --batch " + std::to_string(batch) +
           " --optimizer sgd --lr 0.05 --momentum 0.9 --seed 11 --threads 1 --device " + device + " --out " + out +
           " --save " + out + "/w.safetensors";
  };
  auto one = run_kiln(args(s.dir + "/gpu_one", 16, "cuda:0"));
  REQUIRE_MESSAGE(one.status == 0, one.output);
  auto two = run_mpi(2, args(s.dir + "/gpu_two", 8, "cuda"));
  REQUIRE_MESSAGE(two.status == 0, two.output);
  CHECK(contains(two.output, "during backward"));
  std::string worst;
  const double rel = max_relative_difference(s.dir + "/gpu_one/w.safetensors", s.dir + "/gpu_two/w.safetensors", &worst);
  MESSAGE("2 GPUs: 2 ranks x batch 8 vs 1 process x batch 16 on cuda:0 after 32 steps: max relative difference ", rel,
          " (", worst, ")");
  CHECK(rel <= 1e-5);
}

TEST_CASE("mpi: rank 0's whole-run peaks are its plan's, to the byte, with --accum 2 and with --sync-bn") {
  if (!kiln_test::mpi_can_run()) return;
  for (const std::string extra : {"--accum 2 --momentum 0.9", "--sync-bn --optimizer adamw --lr 1e-3"}) {
    CAPTURE(extra);
    const std::string out = kiln_test::cli_temp_dir("mpi_plan");
    std::filesystem::remove_all(out);
    const kiln_test::CliRun r = run_mpi(2, train_args(out, 8, extra, 2));
    REQUIRE_MESSAGE(r.status == 0, r.output);
    const nlohmann::json run = kiln_test::last_ledger_line(out + "/runs.jsonl");
    CHECK(run["ranks"] == 2);
    CHECK(run["peak_allocated"] == run["plan"]["peak_allocated"]);
    CHECK(run["peak_reserved"] == run["plan"]["peak_reserved"]);
  }
}
