// A trained model carries its preprocessing (engine/train/model_card.h): the card's metadata round
// trip (exact mean/std, what an older file lacks), and end to end through the built binary —
// `kiln predict --weights W --data D --out p.csv` with no other flag reproduces the validation
// accuracy of the run that wrote W (an RGB JPEG folder with --normalize auto and --resize/--crop,
// and an IDX folder); contradicting flags are one error naming each difference unless --force;
// --normalize auto never measures the predicted data; the data's classes are matched to the
// model's by name; a training-state file predicts like the weights; a file written before the
// card existed predicts with one warning.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/image_options.h"
#include "engine/io/safetensors.h"
#include "engine/train/model_card.h"
#include "support/cli/image_folder.h"
#include "support/cli/run_kiln.h"

using kiln_test::contains;
using kiln_test::count_of;
using kiln_test::run_kiln;

namespace {
namespace fs = std::filesystem;

struct Row {
  std::string path, label_name, predicted_name;
  int64_t label = -2, predicted = -2;
  std::vector<double> logits;
};

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) cells.push_back(cell);
  if (!line.empty() && line.back() == ',') cells.push_back("");
  return cells;
}

// index,path,label,predicted,label_name,predicted_name,logit_0..; keyed by the path's last two parts.
std::map<std::string, Row> read_predictions(const std::string& csv, int classes) {
  std::ifstream f(csv);
  std::string line;
  std::getline(f, line);
  REQUIRE(line.rfind("index,path,label,predicted,label_name,predicted_name,logit_0", 0) == 0);
  std::map<std::string, Row> rows;
  while (std::getline(f, line)) {
    const std::vector<std::string> c = split_csv(line);
    REQUIRE(c.size() == (size_t)(6 + classes));
    Row r;
    r.path = c[1];
    r.label = std::stoll(c[2]);
    r.predicted = std::stoll(c[3]);
    r.label_name = c[4];
    r.predicted_name = c[5];
    for (int k = 0; k < classes; ++k) r.logits.push_back(std::stod(c[(size_t)(6 + k)]));
    const fs::path p(r.path);
    rows[p.parent_path().filename().string() + "/" + p.filename().string()] = r;
  }
  return rows;
}

double accuracy_of(const std::map<std::string, Row>& rows) {
  int64_t correct = 0, scored = 0;
  for (const auto& [key, r] : rows)
    if (r.label >= 0) {
      ++scored;
      correct += r.label == r.predicted;
    }
  return scored ? (double)correct / (double)scored : -1.0;
}

// Same images, same logits: exactly (tol 0) for runs of the same batches; another batch composition
// may change a GEMM's summation order, so those compare within `tol`.
bool same_logits(const std::map<std::string, Row>& a, const std::map<std::string, Row>& b, double tol = 0) {
  if (a.size() != b.size()) return false;
  for (const auto& [key, r] : a) {
    auto it = b.find(key);
    if (it == b.end() || it->second.logits.size() != r.logits.size()) return false;
    for (size_t k = 0; k < r.logits.size(); ++k)
      if (std::fabs(it->second.logits[k] - r.logits[k]) > tol) return false;
  }
  return true;
}

// 3 classes of RGB 16x16 JPEGs: train/ 12 per class, val/ 6 per class.
const std::string& rgb_folder() {
  static const std::string root = [] {
    const std::string r = kiln_test::cli_temp_dir("card_rgb");
    kiln_test::make_image_folder(r, 3, 12, 16, 3, false);
    return r;
  }();
  return root;
}

// One training run shared by the cases below: --normalize auto, --image-size 14 --resize 16 (a centre crop).
struct Trained {
  std::string out, weights;
  nlohmann::json ledger;
  std::string train_output;
};
const Trained& trained() {
  static const Trained t = [] {
    Trained r;
    r.out = kiln_test::cli_temp_dir("card_run");
    r.weights = r.out + "/w.safetensors";
    const kiln_test::CliRun run =
        run_kiln("train --model small_cnn --data " + rgb_folder() +
                 " --image-size 14 --resize 16 --normalize auto --epochs 2 --batch 8 --optimizer sgd --lr 0.05 "
                 "--momentum 0.9 --seed 5 --threads 1 --device cpu --workers 2 --out " + r.out + " --save " + r.weights);
    r.train_output = run.output;
    REQUIRE_MESSAGE(run.status == 0, run.output);
    r.ledger = kiln_test::last_ledger_line(r.out + "/runs.jsonl");
    return r;
  }();
  return t;
}

}  // namespace

TEST_CASE("model card: metadata round trip keeps mean/std exact, an older file's card names what it lacks") {
  kiln::ModelCard c;
  c.model = "small_cnn";
  c.num_classes = 3;
  c.class_names = {"cat", "dog, big", "emu"};
  kiln::Preprocessing& p = c.preprocessing;
  p.data_format = "images";
  p.image_size = 14;
  p.channels = 3;
  p.resize = 16;
  p.crop = "center";
  p.normalize = "auto";
  p.mean = {(double)0.48760143f, (double)0.1f, 1.0 / 3.0};
  p.std = {(double)0.2291f, 0.25, 0.7};
  const kiln::ModelCard r = kiln::ModelCard::from_metadata(c.to_metadata(), "mem");
  CHECK(r.missing.empty());
  CHECK(r.model == c.model);
  CHECK(r.num_classes == 3);
  CHECK(r.class_names == c.class_names);
  CHECK(r.preprocessing.mean == p.mean);  // bit-exact doubles
  CHECK(r.preprocessing.std == p.std);
  CHECK(r.preprocessing.image_size == 14);
  CHECK(r.preprocessing.resize == 16);
  CHECK(r.preprocessing.crop == "center");
  CHECK(r.preprocessing.normalize == "auto");
  CHECK(r.preprocessing.data_format == "images");
  // The --normalize text predict hands the loader gives the stored values as floats, exactly.
  const kiln::Normalization n = kiln::Normalization::parse(p.normalize_text());
  float m[3], s[3];
  n.values(3, m, s);
  for (int i = 0; i < 3; ++i) {
    CHECK(m[i] == (float)p.mean[(size_t)i]);
    CHECK(s[i] == (float)p.std[(size_t)i]);
  }
  kiln::Preprocessing none;
  none.mean = {0.0};
  none.std = {1.0};
  CHECK(none.normalize_text() == "none");

  // A class name that is not UTF-8 (a Latin-1 folder name) is stored with U+FFFD, not an error.
  kiln::ModelCard latin = c;
  latin.class_names[0] = "caf\xe9";
  const kiln::ModelCard lr = kiln::ModelCard::from_metadata(latin.to_metadata(), "mem");
  CHECK(lr.class_names[0] == "caf\xef\xbf\xbd");
  CHECK(lr.class_names[1] == "dog, big");

  // What `kiln train --save` wrote before the card: model, classes, channels, size.
  const kiln::ModelCard old = kiln::ModelCard::from_metadata(
      {{"format", "kiln-weights-1"}, {"model", "small_cnn"}, {"num_classes", "10"}, {"in_channels", "1"},
       {"image_size", "28"}},
      "old.safetensors");
  CHECK(old.model == "small_cnn");
  CHECK(old.num_classes == 10);
  CHECK(old.preprocessing.channels == 1);
  CHECK(old.preprocessing.image_size == 28);
  CHECK((old.missing == std::vector<std::string>{"resize/crop", "normalization mean/std", "class names"}));

  // Malformed values are errors naming the file and the key.
  auto meta = c.to_metadata();
  meta["mean"] = "[0.5, \"x\"]";
  CHECK_THROWS_WITH(kiln::ModelCard::from_metadata(meta, "bad.safetensors"),
                    doctest::Contains("bad.safetensors: metadata 'mean' holds \"x\", not a number"));
  meta = c.to_metadata();
  meta["class_names"] = "[\"a\"]";
  CHECK_THROWS_WITH(kiln::ModelCard::from_metadata(meta, "bad.safetensors"),
                    doctest::Contains("1 class names for 3 classes"));
  meta = c.to_metadata();
  meta["std"] = "[0.2, 0, 0.3]";
  CHECK_THROWS_WITH(kiln::ModelCard::from_metadata(meta, "bad.safetensors"), doctest::Contains("must be > 0"));
}

TEST_CASE("cli predict: with no flag but --weights/--data/--out it reproduces the run's val accuracy (images)") {
  const Trained& t = trained();
  // The card: what the run measured and used.
  const kiln::ModelCard card = kiln::read_model_card(t.weights);
  CHECK(card.missing.empty());
  CHECK(card.model == "small_cnn");
  CHECK((card.class_names == std::vector<std::string>{"class0", "class1", "class2"}));
  CHECK(card.preprocessing.image_size == 14);
  CHECK(card.preprocessing.resize == 16);
  CHECK(card.preprocessing.crop == "center");
  CHECK(card.preprocessing.channels == 3);
  CHECK(card.preprocessing.normalize == "auto");
  REQUIRE(card.preprocessing.mean.size() == 3);
  for (int ch = 0; ch < 3; ++ch) {  // the training split's measured values, as the ledger records them
    CHECK((float)card.preprocessing.mean[(size_t)ch] == t.ledger["data"]["mean"][ch].get<float>());
    CHECK((float)card.preprocessing.std[(size_t)ch] == t.ledger["data"]["std"][ch].get<float>());
    CHECK(card.preprocessing.mean[(size_t)ch] > 0.05);  // measured, not the identity
  }
  // The training-state file carries the same card.
  const kiln::ModelCard state_card = kiln::read_model_card(t.out + "/checkpoint.safetensors");
  CHECK(state_card.missing.empty());
  CHECK(state_card.preprocessing.mean == card.preprocessing.mean);
  CHECK(state_card.class_names == card.class_names);

  const std::string csv = t.out + "/p.csv";
  const kiln_test::CliRun p = run_kiln("predict --weights " + t.weights + " --data " + rgb_folder() + " --out " + csv);
  REQUIRE_MESSAGE(p.status == 0, p.output);
  CHECK_FALSE(contains(p.output, "warning"));
  const std::map<std::string, Row> rows = read_predictions(csv, 3);
  REQUIRE(rows.size() == 18);  // val/: 6 per class
  for (const auto& [key, r] : rows) {
    CHECK(r.label_name == key.substr(0, key.find('/')));
    CHECK(r.label == std::stoll(r.label_name.substr(5)));
    CHECK(r.predicted_name == "class" + std::to_string(r.predicted));
    // No argmax near a tie: the accuracy below does not rest on a rounding.
    double top = -1e30, second = -1e30;
    for (double l : r.logits) {
      if (l > top) {
        second = top;
        top = l;
      } else if (l > second) {
        second = l;
      }
    }
    CHECK(top - second > 1e-4);
  }
  const double val_acc = t.ledger["final_val_acc"].get<double>();
  CHECK(accuracy_of(rows) == val_acc);
  CHECK(contains(p.output, "predict: 18 samples"));

  // --normalize auto means the stored values: the same numbers, also on a folder whose own statistics
  // differ (val/ alone, no train/ split to measure), and a training-state file predicts like the weights.
  const std::string csv_auto = t.out + "/p_auto.csv", csv_val = t.out + "/p_val.csv", csv_state = t.out + "/p_state.csv";
  const kiln_test::CliRun pa = run_kiln("predict --weights " + t.weights + " --data " + rgb_folder() +
                                        "/val --normalize auto --model small_cnn --out " + csv_auto);
  REQUIRE_MESSAGE(pa.status == 0, pa.output);
  const kiln_test::CliRun pv = run_kiln("predict --weights " + t.weights + " --data " + rgb_folder() + "/val --out " + csv_val);
  REQUIRE_MESSAGE(pv.status == 0, pv.output);
  const kiln_test::CliRun ps =
      run_kiln("predict --weights " + t.out + "/checkpoint.safetensors --data " + rgb_folder() + " --out " + csv_state);
  REQUIRE_MESSAGE(ps.status == 0, ps.output);
  CHECK(same_logits(read_predictions(csv_auto, 3), rows));
  CHECK(same_logits(read_predictions(csv_val, 3), rows));
  CHECK(same_logits(read_predictions(csv_state, 3), rows));
}

TEST_CASE("cli predict: flags that contradict the weights are one error naming each, unless --force") {
  const Trained& t = trained();
  const std::string csv = t.out + "/contra.csv";
  const kiln_test::CliRun bad =
      run_kiln("predict --weights " + t.weights + " --data " + rgb_folder() + " --out " + csv +
               " --model resnet18_small --image-size 12 --channels 1 --normalize imagenet --crop none");
  CAPTURE(bad.output);
  CHECK(bad.status != 0);
  CHECK(count_of(bad.output, "kiln: error: ") == 1);
  CHECK(contains(bad.output, "was trained otherwise: --model resnet18_small (the weights hold a small_cnn); "
                             "--image-size 12 (trained at 14); --channels 1 (trained with 3); --crop none (trained "
                             "with center); --normalize imagenet (trained with auto: mean "));
  CHECK(contains(bad.output, "pass --force"));
  CHECK_FALSE(fs::exists(csv));
  // The stored values given again are no contradiction.
  const kiln_test::CliRun same = run_kiln("predict --weights " + t.weights + " --data " + rgb_folder() + " --out " +
                                          csv + " --image-size 14 --resize 16 --crop center --channels 3");
  CHECK_MESSAGE(same.status == 0, same.output);
  // --force: the given preprocessing is used, each difference said once.
  const std::string forced = t.out + "/forced.csv", plain = t.out + "/plain.csv";
  const kiln_test::CliRun f = run_kiln("predict --weights " + t.weights + " --data " + rgb_folder() + " --out " +
                                       forced + " --normalize none --force");
  REQUIRE_MESSAGE(f.status == 0, f.output);
  CHECK(count_of(f.output, "predict: --force: --normalize none (trained with auto: mean ") == 1);
  const kiln_test::CliRun pl = run_kiln("predict --weights " + t.weights + " --data " + rgb_folder() + " --out " + plain);
  REQUIRE_MESSAGE(pl.status == 0, pl.output);
  CHECK_FALSE(same_logits(read_predictions(forced, 3), read_predictions(plain, 3)));
}

TEST_CASE("cli predict: the data's class folders are matched to the model's classes by name") {
  const Trained& t = trained();
  // class1/, class2/ and zebra/: by sorted position class1 would be scored as class0.
  const std::string d = kiln_test::cli_temp_dir("card_names");
  for (const char* cls : {"class1", "class2"}) fs::copy(rgb_folder() + "/val/" + cls, d + "/" + cls);
  fs::create_directories(d + "/zebra");
  fs::copy_file(rgb_folder() + "/val/class0/0.jpg", d + "/zebra/z.jpg");
  const std::string csv = d + "/p.csv", full = d + "/full.csv";
  const kiln_test::CliRun p = run_kiln("predict --weights " + t.weights + " --data " + d + " --out " + csv);
  REQUIRE_MESSAGE(p.status == 0, p.output);
  CHECK(count_of(p.output, "predict: the data's class zebra is not among the model's 3 classes: predicted, not scored\n") == 1);
  CHECK(count_of(p.output, "predict: the model's class class0 has no samples in " + d + "\n") == 1);
  CHECK(contains(p.output, "predict: 13 samples"));
  CHECK(contains(p.output, "over the 12 whose label is one of the model's 3 classes (1 have another label"));
  const std::map<std::string, Row> rows = read_predictions(csv, 3);
  REQUIRE(rows.size() == 13);
  for (const auto& [key, r] : rows) {
    if (r.label_name == "zebra") {
      CHECK(r.label == -1);
    } else {
      CHECK(r.label == (r.label_name == "class1" ? 1 : 2));
    }
    CHECK(r.predicted_name == "class" + std::to_string(r.predicted));
  }
  // The same images in the full val/ run: the same logits, the same per-image verdicts.
  const kiln_test::CliRun pf = run_kiln("predict --weights " + t.weights + " --data " + rgb_folder() + " --out " + full);
  REQUIRE_MESSAGE(pf.status == 0, pf.output);
  std::map<std::string, Row> expect = read_predictions(full, 3);
  std::map<std::string, Row> subset;
  for (const auto& [key, r] : expect)
    if (key.rfind("class0/", 0) != 0) subset[key] = r;
  std::map<std::string, Row> known = rows;
  known.erase("zebra/z.jpg");
  // (13 images in one batch here, 18 there: the same logits up to the summation order)
  CHECK(same_logits(known, subset, 1e-4));
  CHECK(accuracy_of(rows) == accuracy_of(subset));
  std::map<std::string, Row> zebra = {{"z", rows.at("zebra/z.jpg")}}, class0 = {{"z", expect.at("class0/0.jpg")}};
  CHECK(same_logits(zebra, class0, 1e-4));
}

TEST_CASE("cli predict: a weights file without preprocessing metadata predicts with one warning") {
  const Trained& t = trained();
  const std::string d = kiln_test::cli_temp_dir("card_old");
  // The weights as kiln wrote them before the card: model, classes, channels and size only.
  kiln::SafetensorsFile f = kiln::read_safetensors(t.weights);
  const std::string old = d + "/old.safetensors";
  kiln::write_safetensors(old, f.tensors,
                          {{"format", "kiln-weights-1"}, {"model", "small_cnn"}, {"num_classes", "3"},
                           {"in_channels", "3"}, {"image_size", "14"}});
  const kiln_test::CliRun p = run_kiln("predict --weights " + old + " --data " + rgb_folder() + " --out " + d + "/p.csv");
  REQUIRE_MESSAGE(p.status == 0, p.output);
  CHECK(count_of(p.output, "warning") == 1);
  CHECK(contains(p.output, "predict: warning: " + old +
                               " has no resize/crop, normalization mean/std, class names (written before kiln stored a "
                               "model's preprocessing); assumed --crop center, --normalize none, the model's classes "
                               "are the data's in sorted order\n"));
  // auto cannot be honoured without the training statistics, and is never measured on the data.
  const kiln_test::CliRun a =
      run_kiln("predict --weights " + old + " --data " + rgb_folder() + " --normalize auto --out " + d + "/a.csv");
  CHECK(a.status != 0);
  CHECK(contains(a.output, "holds no training statistics"));
  // The training run's values given by hand: the new file's predictions, to the logit.
  const kiln::Preprocessing& pp = kiln::read_model_card(t.weights).preprocessing;
  const kiln_test::CliRun g = run_kiln("predict --weights " + old + " --data " + rgb_folder() + " --resize 16 --normalize " +
                                       pp.normalize_text() + " --out " + d + "/g.csv");
  REQUIRE_MESSAGE(g.status == 0, g.output);
  const kiln_test::CliRun n = run_kiln("predict --weights " + t.weights + " --data " + rgb_folder() + " --out " + d + "/n.csv");
  REQUIRE_MESSAGE(n.status == 0, n.output);
  CHECK(same_logits(read_predictions(d + "/g.csv", 3), read_predictions(d + "/n.csv", 3)));
}

namespace {
void write_idx_u8(const std::string& path, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::ofstream f(path, std::ios::binary);
  const uint8_t head[4] = {0, 0, 0x08, (uint8_t)dims.size()};
  f.write((const char*)head, 4);
  for (uint32_t d : dims) {
    const uint8_t be[4] = {(uint8_t)(d >> 24), (uint8_t)(d >> 16), (uint8_t)(d >> 8), (uint8_t)d};
    f.write((const char*)be, 4);
  }
  f.write((const char*)data.data(), (std::streamsize)data.size());
}
// n 8x8 images whose class (of 2) is the brightness of the top half, plus noise.
void write_idx_split(const std::string& dir, const char* prefix, uint32_t n, uint32_t seed) {
  std::vector<uint8_t> px((size_t)n * 64), labels(n);
  for (uint32_t i = 0; i < n; ++i) {
    labels[i] = (uint8_t)(i % 2);
    for (int j = 0; j < 64; ++j) {
      seed = seed * 1664525u + 1013904223u;
      px[(size_t)i * 64 + (size_t)j] = (uint8_t)((j < 32 ? 60 + 120 * labels[i] : 20) + (seed >> 26));
    }
  }
  write_idx_u8(dir + "/" + prefix + "-images-idx3-ubyte", {n, 8, 8}, px);
  write_idx_u8(dir + "/" + prefix + "-labels-idx1-ubyte", {n}, labels);
}
}  // namespace

TEST_CASE("cli predict: an IDX run's card holds its training mean/std, flag-free predict reproduces its val accuracy") {
  const std::string d = kiln_test::cli_temp_dir("card_idx");
  fs::create_directories(d + "/data");
  write_idx_split(d + "/data", "train", 32, 1);
  write_idx_split(d + "/data", "t10k", 16, 2);
  const kiln_test::CliRun t = run_kiln("train --model small_cnn --data " + d + "/data --epochs 2 --batch 8 --threads 1 "
                                       "--device cpu --out " + d + "/out --save " + d + "/w.safetensors");
  REQUIRE_MESSAGE(t.status == 0, t.output);
  const nlohmann::json ledger = kiln_test::last_ledger_line(d + "/out/runs.jsonl");
  const kiln::ModelCard card = kiln::read_model_card(d + "/w.safetensors");
  CHECK(card.missing.empty());
  CHECK(card.preprocessing.data_format == "idx");
  CHECK((card.class_names == std::vector<std::string>{"0", "1"}));
  REQUIRE(card.preprocessing.mean.size() == 1);
  CHECK(card.preprocessing.mean[0] == ledger["data"]["mean"].get<double>());
  CHECK(card.preprocessing.std[0] == ledger["data"]["std"].get<double>());
  const kiln_test::CliRun p =
      run_kiln("predict --weights " + d + "/w.safetensors --data " + d + "/data --out " + d + "/p.csv");
  REQUIRE_MESSAGE(p.status == 0, p.output);
  std::ifstream f(d + "/p.csv");
  std::string line;
  std::getline(f, line);
  CHECK(line == "index,label,predicted,label_name,predicted_name,logit_0,logit_1");
  int64_t n = 0, correct = 0;
  std::vector<std::string> logits;
  while (std::getline(f, line)) {
    const std::vector<std::string> c = split_csv(line);
    REQUIRE(c.size() == 7);
    ++n;
    correct += c[1] == c[2];
    CHECK(std::fabs(std::stod(c[5]) - std::stod(c[6])) > 1e-4);  // no argmax near a tie
    logits.push_back(c[5] + "," + c[6]);
  }
  CHECK(n == 16);
  CHECK((double)correct / (double)n == ledger["final_val_acc"].get<double>());
  // A folder holding only the t10k files has no training images to measure: the stored statistics
  // are used, so the logits are the same.
  fs::create_directories(d + "/test_only");
  for (const char* name : {"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"})
    fs::copy_file(d + "/data/" + name, d + "/test_only/" + name);
  const kiln_test::CliRun q =
      run_kiln("predict --weights " + d + "/w.safetensors --data " + d + "/test_only --out " + d + "/q.csv");
  REQUIRE_MESSAGE(q.status == 0, q.output);
  std::ifstream g(d + "/q.csv");
  std::getline(g, line);
  size_t i = 0;
  while (std::getline(g, line)) {
    const std::vector<std::string> c = split_csv(line);
    REQUIRE(c.size() == 7);
    REQUIRE(i < logits.size());
    CHECK(c[5] + "," + c[6] == logits[i++]);
  }
  CHECK(i == logits.size());
}
