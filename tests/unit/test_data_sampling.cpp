// RandomResizedCrop statistics, samplers (permutation, weighted frequencies within 3 sigma,
// batching) and data set listing (image folder, splits, CSV, errors).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "data/dataset.h"
#include "data/sampler.h"
#include "data/transforms.h"
#include "test_data_support.h"

using namespace kiln;
using namespace kiln_test;

TEST_CASE("RandomResizedCrop: area fraction and log aspect ratio are uniform when every try fits") {
  // scale (0.08, 0.5) on a square image: every first try fits (w <= sqrt(0.5 * 4/3) < 1 side).
  RrcParams p;
  p.scale_hi = 0.5f;
  const int W = 2000, H = 2000, N = 20000;
  const double lr = std::log(4.0 / 3.0);
  std::vector<int> abins(10, 0), rbins(10, 0), xbins(10, 0);
  double asum = 0;
  for (int i = 0; i < N; ++i) {
    CropBox b = random_resized_crop_box(W, H, p, 42, sample_stream(0, (uint64_t)i));
    REQUIRE(b.x >= 0);
    REQUIRE(b.y >= 0);
    REQUIRE(b.x + b.w <= W);
    REQUIRE(b.y + b.h <= H);
    double a = (double)b.w * b.h / (W * H);
    double r = std::log((double)b.w / b.h);
    asum += a;
    abins[std::min(9, (int)((a - 0.08) / 0.42 * 10))]++;
    rbins[std::min(9, std::max(0, (int)((r + lr) / (2 * lr) * 10)))]++;
    if (b.w < W) xbins[std::min(9, (int)((double)b.x / (W - b.w + 1) * 10))]++;
  }
  CHECK(asum / N == doctest::Approx(0.29).epsilon(0.01));
  // Each bin ~ Binomial(N, 0.1): 5 sigma = 5 * sqrt(N * 0.09) ~ 212.
  for (int k = 0; k < 10; ++k) {
    CAPTURE(k);
    CHECK(std::abs(abins[k] - N / 10) < 212);
    CHECK(std::abs(rbins[k] - N / 10) < 212);
    CHECK(std::abs(xbins[k] - N / 10) < 212);
  }
}

TEST_CASE("RandomResizedCrop: default params, deterministic per stream, fallback on extreme images") {
  RrcParams p;
  std::set<std::pair<int, int>> sizes;
  int full = 0;
  for (int i = 0; i < 2000; ++i) {
    CropBox a = random_resized_crop_box(640, 480, p, 7, sample_stream(3, (uint64_t)i));
    CropBox b = random_resized_crop_box(640, 480, p, 7, sample_stream(3, (uint64_t)i));
    CHECK(a.x == b.x);
    CHECK(a.w == b.w);
    double r = (double)a.w / a.h;
    CHECK(r > 0.74);
    CHECK(r < 1.34);
    double f = (double)a.w * a.h / (640 * 480);
    CHECK(f > 0.079);
    CHECK(f <= 1.0);
    sizes.insert({a.w, a.h});
    if (a.w == 640 && a.h == 480) ++full;
  }
  CHECK(sizes.size() > 1000);
  CHECK(full < 20);
  // A 1000x10 strip: no try can fit the ratio range -> centred fallback clamped to ratio 4/3.
  CropBox f = random_resized_crop_box(1000, 10, p, 1, 0);
  CHECK(f.h == 10);
  CHECK(f.w == 13);
  CHECK(f.x == (1000 - 13) / 2);
  CHECK(f.y == 0);
}

TEST_CASE("random permutation: a permutation, fixed by (seed, epoch), reshuffled each epoch") {
  auto p0 = random_permutation(1000, 5, 0);
  auto sorted = p0;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == sequential_indices(1000));
  CHECK(random_permutation(1000, 5, 0) == p0);
  CHECK(random_permutation(1000, 5, 1) != p0);
  CHECK(random_permutation(1000, 6, 0) != p0);
  // Where element 0 lands over 4000 epochs: uniform over 10 position bins.
  std::vector<int> bins(10, 0);
  for (uint64_t e = 0; e < 4000; ++e) {
    auto p = random_permutation(100, 11, e);
    bins[(size_t)(std::find(p.begin(), p.end(), 0) - p.begin()) / 10]++;
  }
  for (int b : bins) CHECK(std::abs(b - 400) < 5 * std::sqrt(4000 * 0.09));
}

TEST_CASE("weighted sampler: class frequencies within 3 sigma (balance and explicit weights)") {
  std::vector<int64_t> labels;
  const int counts[3] = {500, 60, 7};
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < counts[c]; ++i) labels.push_back(c);
  const size_t N = 30000;
  auto check_freq = [&](const SamplerSpec& s, const double* p) {
    auto idx = epoch_indices(s, labels, 3, 0);
    REQUIRE(idx.size() == N);
    std::vector<double> got(3, 0);
    for (auto i : idx) got[(size_t)labels[i]] += 1;
    for (int c = 0; c < 3; ++c) {
      double sigma = std::sqrt(N * p[c] * (1 - p[c]));
      CAPTURE(c);
      CHECK(std::fabs(got[c] - N * p[c]) <= 3 * sigma);
    }
    CHECK(epoch_indices(s, labels, 3, 0) == idx);
    CHECK(epoch_indices(s, labels, 3, 1) != idx);
  };
  SamplerSpec s;
  s.kind = SamplerKind::weighted;
  s.seed = 3;
  s.num_samples = N;
  s.balance = true;
  const double bal[3] = {1.0 / 3, 1.0 / 3, 1.0 / 3};
  check_freq(s, bal);
  s.balance = false;
  s.class_weights = {1.0, 2.0, 10.0};
  double tot = 500 * 1.0 + 60 * 2.0 + 7 * 10.0;
  const double pw[3] = {500 / tot, 120 / tot, 70 / tot};
  check_freq(s, pw);
  // Zero weight: never drawn.
  s.class_weights = {1.0, 0.0, 1.0};
  for (auto i : epoch_indices(s, labels, 3, 2)) CHECK(labels[i] != 1);
  s.class_weights = {0.0, 0.0, 0.0};
  CHECK_THROWS_AS(epoch_indices(s, labels, 3, 0), Error);
}

TEST_CASE("batching and drop_last") {
  auto b = make_batches(sequential_indices(10), 4, false);
  REQUIRE(b.size() == 3);
  CHECK(b[2] == std::vector<size_t>{8, 9});
  CHECK(make_batches(sequential_indices(10), 4, true).size() == 2);
  CHECK(make_batches(sequential_indices(8), 4, true).size() == 2);
}

TEST_CASE("image folder: sorted classes, extensions any case, splits, clear errors") {
  TempDir d;
  for (const char* f : {"cat/b.JPG", "cat/a.png", "cat/sub/c.jpeg", "cat/notes.txt", "dog/x.Gif", "ant/1.bmp",
                        "ant/.hidden.jpg", "empty/readme.md", "stray.jpg"})
    write_bytes(d / f, "x");
  ImageDataset ds = image_folder(d.path);
  CHECK(ds.classes == std::vector<std::string>{"ant", "cat", "dog", "empty"});
  REQUIRE(ds.size() == 5);
  CHECK(ds.samples[0].path == d / "ant/1.bmp");
  CHECK(ds.samples[0].label == 0);
  CHECK(ds.samples[1].path == d / "cat/a.png");
  CHECK(ds.samples[2].path == d / "cat/b.JPG");
  CHECK(ds.samples[3].path == d / "cat/sub/c.jpeg");
  CHECK(ds.samples[4].label == 2);
  CHECK(ds.class_counts() == std::vector<size_t>{1, 3, 1, 0});

  auto msg = [](const std::string& p) {
    try {
      image_folder(p);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(msg(d / "nope").find(d / "nope") != std::string::npos);
  CHECK(msg(d / "nope").find("does not exist") != std::string::npos);
  CHECK(msg(d / "empty").find("no class subfolders") != std::string::npos);
  write_bytes(d / "onlytxt/k/a.txt", "x");
  CHECK(msg(d / "onlytxt").find("no images") != std::string::npos);

  TempDir s;
  for (const char* f : {"train/a/1.jpg", "train/b/2.jpg", "train/b/3.jpg", "val/b/4.jpg"}) write_bytes(s / f, "x");
  CHECK(has_split_folders(s.path));
  CHECK(!has_split_folders(d.path));
  DatasetSplits sp = image_folder_splits(s.path);
  CHECK(sp.eval_name == "val");
  CHECK(sp.train.size() == 3);
  REQUIRE(sp.eval.size() == 1);
  CHECK(sp.eval.samples[0].label == 1);  // "b" in train's class list
  write_bytes(s / "val/zzz/5.jpg", "x");
  CHECK_THROWS_AS(image_folder_splits(s.path), Error);
}

TEST_CASE("csv data set: header detection, relative paths, class names, quoted fields, errors") {
  TempDir d;
  write_bytes(d / "list.csv", "path,label\nimgs/a.jpg,1\n/abs/b.png, 0\n\n\"c,d.jpg\",2\n");
  ImageDataset ds = csv_dataset(d / "list.csv");
  REQUIRE(ds.size() == 3);
  CHECK(ds.samples[0].path == d / "imgs/a.jpg");
  CHECK(ds.samples[0].label == 1);
  CHECK(ds.samples[1].path == "/abs/b.png");
  CHECK(ds.samples[2].path == d / "c,d.jpg");
  CHECK(ds.classes.size() == 3);
  write_bytes(d / "names.csv", "x.jpg,dog\ny.jpg,cat\nz.jpg,dog\n");
  ImageDataset dn = csv_dataset(d / "names.csv");
  CHECK(dn.classes == std::vector<std::string>{"cat", "dog"});
  CHECK(dn.samples[0].label == 1);
  CHECK(dn.size() == 3);
  write_bytes(d / "noheader.csv", "x.jpg,0\ny.jpg,1\n");
  CHECK(csv_dataset(d / "noheader.csv").size() == 2);
  write_bytes(d / "hdr2.csv", "image_file,target\nx.jpg,0\ny.jpg,1\n");
  CHECK(csv_dataset(d / "hdr2.csv").size() == 2);
  write_bytes(d / "bad.csv", "x.jpg,0\njustonefield\n");
  try {
    csv_dataset(d / "bad.csv");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("bad.csv:2") != std::string::npos);
  }
  CHECK_THROWS_AS(csv_dataset(d / "missing.csv"), Error);
  write_bytes(d / "empty.csv", "\n");
  CHECK_THROWS_AS(csv_dataset(d / "empty.csv"), Error);
  CHECK(open_image_dataset(d / "names.csv").size() == 3);
}

TEST_CASE("csv data set: one label rule (all integers are indices, else all are names, sorted), mixtures and extra columns are errors") {
  TempDir d;
  auto contains = [](const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; };
  auto error_of = [&](const std::string& name, const std::string& text) {
    write_bytes(d / name, text);
    try {
      csv_dataset(d / name);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  // Integers are class indices: 0 and 7 make classes 0..7.
  write_bytes(d / "ints.csv", "a.jpg,0\nb.jpg,7\n");
  ImageDataset di = csv_dataset(d / "ints.csv");
  CHECK(di.classes.size() == 8);
  CHECK(di.samples[1].label == 7);
  // Names, sorted: dog -> 1, cat -> 0.
  write_bytes(d / "names.csv", "a.jpg,dog\nb.jpg,cat\n");
  CHECK(csv_dataset(d / "names.csv").samples[0].label == 1);
  // A mixture names the line and the first line's kind (was: names "1", "cat", "dog").
  std::string e = error_of("mix.csv", "a.jpg,1\nb.jpg,cat\nc.jpg,dog\n");
  CHECK_MESSAGE(contains(e, "mix.csv:2: label 'cat' is a name but line 1's label '1' is an integer"), e);
  e = error_of("mix2.csv", "path,label\na.jpg,cat\nb.jpg,0\n");
  CHECK_MESSAGE(contains(e, "mix2.csv:3: label '0' is an integer but line 2's label 'cat' is a name"), e);
  // A first line whose path is a file is a sample, not a header "img,y": its name label mixes.
  write_bytes(d / "real.jpg", "x");
  e = error_of("mix3.csv", "real.jpg,cat\nb.jpg,0\nc.jpg,1\n");
  CHECK_MESSAGE(contains(e, "mix3.csv:2: label '0' is an integer but line 1's label 'cat' is a name"), e);
  write_bytes(d / "hdr.csv", "img,y\nb.jpg,0\nc.jpg,1\n");  // a header of any words above integers
  CHECK(csv_dataset(d / "hdr.csv").size() == 2);
  // A number that is not an integer never becomes a name.
  for (const char* label : {"0.0", "1e3", "-2.5", "3."}) {
    CAPTURE(label);
    e = error_of("float.csv", std::string("a.jpg,0\nb.jpg,") + label + "\n");
    CHECK_MESSAGE(contains(e, std::string("float.csv:2: label '") + label + "' is a number but not an integer"), e);
  }
  e = error_of("float1.csv", "a.jpg,0.0\nb.jpg,1.0\n");
  CHECK_MESSAGE(contains(e, "float1.csv:1: label '0.0' is a number but not an integer"), e);
  // An extra column: file, line and column count.
  e = error_of("extra.csv", "a.jpg,0\nb.jpg,1,0.5\n");
  CHECK_MESSAGE(contains(e, "extra.csv:2: 3 columns, expected 2 (path,label)"), e);
  e = error_of("extra_hdr.csv", "path,label,weight\na.jpg,0,1\n");
  CHECK_MESSAGE(contains(e, "extra_hdr.csv:1: 3 columns, expected 2"), e);
  // A quoted comma is one column.
  write_bytes(d / "quoted.csv", "\"a,b.jpg\",cat\nc.jpg,dog\n");
  CHECK(csv_dataset(d / "quoted.csv").size() == 2);
}
