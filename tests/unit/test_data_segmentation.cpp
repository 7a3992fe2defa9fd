// Segmentation data (data/segmentation_*.h): pairing by stem, image,mask CSVs, the joint transform
// keeping image and mask aligned through random crop + flip, nearest-neighbour masks holding only
// source classes, bad samples reported per file and skipped, determinism with skip_batches and any
// worker count, and the class count from a scan, classes.txt or the caller. Files are small PNGs
// made here (lossless, so pixel values encode the classes exactly).
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <filesystem>
#include <set>

#include "data/mask_array_source.h"
#include "data/png_io.h"
#include "data/segmentation_dataset.h"
#include "data/segmentation_sample.h"
#include "data/segmentation_source.h"
#include "engine/ops/ops.h"
#include "test_data_support.h"

using namespace kiln;
using namespace kiln_test;

namespace {

// A w x h mask of 8x8 blocks with pseudo-random classes from `classes`, and the RGB image whose
// every channel is 40 * class + 20 (class recoverable from any pixel not on a blurred edge).
void block_pair(int w, int h, int seed, const std::vector<int>& classes, Image* img, Image* mask) {
  mask->w = img->w = w;
  mask->h = img->h = h;
  mask->c = 1;
  img->c = 3;
  mask->px.assign((size_t)w * h, 0);
  img->px.assign((size_t)w * h * 3, 0);
  uint32_t s = 2166136261u ^ (uint32_t)seed;
  std::vector<int> blk((size_t)((w + 7) / 8) * ((h + 7) / 8));
  for (int& b : blk) {
    s = s * 1664525u + 1013904223u;
    b = classes[(s >> 16) % classes.size()];
  }
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const int k = blk[(size_t)(y / 8) * ((w + 7) / 8) + x / 8];
      mask->px[(size_t)y * w + x] = (uint8_t)k;
      const uint8_t v = (uint8_t)(k == 255 ? 250 : 40 * k + 20);
      for (int c = 0; c < 3; ++c) img->px[((size_t)y * w + x) * 3 + c] = v;
    }
}

void write_pair(const TempDir& t, const std::string& stem, int w, int h, int seed, const std::vector<int>& classes) {
  Image img, mask;
  block_pair(w, h, seed, classes, &img, &mask);
  write_bytes(t / ("images/" + stem + ".png"), encode_png(img));
  write_bytes(t / ("masks/" + stem + ".png"), encode_png(mask));
}

Image flat_mask(int w, int h, uint8_t v) {
  Image m;
  m.w = w;
  m.h = h;
  m.c = 1;
  m.px.assign((size_t)w * h, v);
  return m;
}

ImageOptions opts(const std::string& size, const std::string& augment, int workers = 2) {
  ImageOptions o;
  o.image_size = size;
  o.augment = augment;
  o.crop = "none";
  o.workers = workers;
  return o;
}

const float kZero[3] = {0, 0, 0}, kOne[3] = {1, 1, 1};

std::vector<SourceBatch> all_batches(DataSource& s, int64_t epoch, int64_t batch, bool train, int64_t skip = 0) {
  std::vector<SourceBatch> v;
  s.start_epoch(epoch, batch, train);
  s.skip_batches(skip);
  SourceBatch b;
  while (s.next(&b)) v.push_back(b);
  return v;
}

bool same(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  const size_t n = (size_t)a.numel() * (a.dtype() == DType::f32 ? 4 : 8);
  return std::memcmp(a.data_ptr(), b.data_ptr(), n) == 0;
}

}  // namespace

TEST_CASE("segmentation folder: images and masks pair by relative stem, orphans and missing masks listed") {
  TempDir t;
  write_pair(t, "a", 16, 16, 1, {0, 1});
  write_pair(t, "sub/b", 16, 16, 2, {0, 1});
  write_bytes(t / "images/c.png", encode_png(synth_photo(8, 8, 1)));  // no mask
  write_bytes(t / "masks/orphan.png", encode_png(synth_photo(8, 8, 1)));
  write_bytes(t / "masks/sub/b.txt", "not a mask");
  write_bytes(t / "classes.txt", "background\r\nthing\n\n");
  CHECK(is_segmentation_folder(t.path));
  CHECK(is_segmentation_data(t.path));
  SegmentationDataset ds = segmentation_folder(t.path);
  REQUIRE(ds.size() == 3);
  CHECK(ds.samples[0].image == t / "images/a.png");
  CHECK(ds.samples[0].mask == t / "masks/a.png");
  CHECK(ds.samples[1].image == t / "images/c.png");
  CHECK(ds.samples[1].mask.empty());
  CHECK(ds.samples[2].image == t / "images/sub/b.png");
  CHECK(ds.samples[2].mask == t / "masks/sub/b.png");
  REQUIRE(ds.orphan_masks.size() == 1);
  CHECK(ds.orphan_masks[0] == t / "masks/orphan.png");
  CHECK(ds.classes == std::vector<std::string>{"background", "thing"});
  // Two images with one stem: ambiguous, refused naming both.
  write_bytes(t / "images/a.jpg", "x");
  CHECK_THROWS_WITH_AS(segmentation_folder(t.path), doctest::Contains("a.jpg"), Error);
}

TEST_CASE("segmentation csv: header image,mask, paths relative to the CSV, errors name the line") {
  TempDir t;
  write_pair(t, "p", 16, 16, 3, {0, 2});
  write_bytes(t / "list.csv", "Image, Mask\nimages/p.png,masks/p.png\n\n\"images/p.png\",masks/p.png\r\n");
  CHECK(is_segmentation_csv(t / "list.csv"));
  CHECK(is_segmentation_data(t / "list.csv"));
  SegmentationDataset ds = segmentation_csv(t / "list.csv");
  REQUIRE(ds.size() == 2);
  CHECK(ds.samples[1].image == t / "images/p.png");
  CHECK(ds.samples[1].mask == t / "masks/p.png");
  write_bytes(t / "plain.csv", "path,label\na.png,0\n");
  CHECK_FALSE(is_segmentation_data(t / "plain.csv"));
  write_bytes(t / "bad.csv", "image,mask\na.png,m.png\nonly-one-field\n");
  CHECK_THROWS_WITH_AS(segmentation_csv(t / "bad.csv"), doctest::Contains("bad.csv:3"), Error);
  CHECK_FALSE(is_segmentation_data(t.path + "/missing"));
}

TEST_CASE("segmentation sample: random crop + flip keep image and mask aligned") {
  TempDir t;
  write_pair(t, "s", 64, 48, 7, {0, 1, 2, 3, 4});
  SegmentationTransform tr;
  tr.image.kind = SampleTransform::Kind::random_resized_crop;
  tr.image.rrc.scale_lo = 0.3f;
  tr.image.random_hflip = true;
  tr.image.out_w = tr.image.out_h = 32;
  tr.num_classes = 5;
  const size_t S = 32 * 32;
  std::vector<float> x(3 * S);
  std::vector<int64_t> y(S);
  int flipped = 0, unflipped = 0;
  for (uint64_t k = 0; k < 12; ++k) {
    CAPTURE(k);
    SegmentationSampleInfo info =
        load_segmentation_sample(t / "images/s.png", t / "masks/s.png", tr, 11, sample_stream(0, k), x.data(), y.data());
    (info.image.flipped ? flipped : unflipped) += 1;
    // The class each image pixel encodes, against the mask: equal except along blurred block edges;
    // the same count against the mirrored mask shows the check would catch a flip applied to one only.
    size_t agree = 0, agree_mirrored = 0;
    for (int r = 0; r < 32; ++r)
      for (int c = 0; c < 32; ++c) {
        const int from_x = (int)std::lround((x[(size_t)r * 32 + c] * 255.f - 20.f) / 40.f);
        agree += from_x == y[(size_t)r * 32 + c];
        agree_mirrored += from_x == y[(size_t)r * 32 + (31 - c)];
      }
    CHECK(agree >= S * 85 / 100);
    CHECK(agree > agree_mirrored);
  }
  CHECK(flipped >= 2);  // both branches ran (12 draws of p = 0.5 for this seed)
  CHECK(unflipped >= 2);
}

TEST_CASE("segmentation sample: an identity geometry gives the image and the mask exactly, flipped together") {
  TempDir t;
  write_pair(t, "s", 24, 16, 5, {0, 1, 2, 255});
  SegmentationTransform tr;
  tr.image.kind = SampleTransform::Kind::resize_exact;
  tr.image.out_w = 24;
  tr.image.out_h = 16;
  tr.image.random_hflip = true;
  tr.num_classes = 3;
  Image img, mask;
  block_pair(24, 16, 5, {0, 1, 2, 255}, &img, &mask);
  std::vector<float> x(3 * 24 * 16);
  std::vector<int64_t> y(24 * 16);
  bool saw[2] = {false, false};
  for (uint64_t k = 0; k < 8; ++k) {
    SegmentationSampleInfo info =
        load_segmentation_sample(t / "images/s.png", t / "masks/s.png", tr, 3, sample_stream(1, k), x.data(), y.data());
    saw[info.image.flipped] = true;
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 24; ++c) {
        const int sc = info.image.flipped ? 23 - c : c;
        REQUIRE(y[(size_t)r * 24 + c] == mask.px[(size_t)r * 24 + sc]);
        REQUIRE(x[(size_t)r * 24 + c] == doctest::Approx(img.px[((size_t)r * 24 + sc) * 3] / 255.0).epsilon(1e-6));
      }
  }
  CHECK(saw[0]);
  CHECK(saw[1]);
}

TEST_CASE("segmentation sample: nearest-neighbour masks hold only the source's classes at any scale") {
  TempDir t;
  write_pair(t, "s", 37, 29, 9, {0, 3, 7, 255});
  const std::set<int64_t> source = {0, 3, 7, 255};
  std::vector<float> x(3 * 50 * 50);
  std::vector<int64_t> y(50 * 50);
  for (auto kind : {SampleTransform::Kind::random_resized_crop, SampleTransform::Kind::resize_exact,
                    SampleTransform::Kind::resize_center_crop})
    for (int size : {13, 50}) {
      SegmentationTransform tr;
      tr.image.kind = kind;
      tr.image.out_w = tr.image.out_h = size;
      tr.image.resize = size;
      tr.image.random_hflip = true;
      tr.num_classes = 8;
      for (uint64_t k = 0; k < 4; ++k) {
        load_segmentation_sample(t / "images/s.png", t / "masks/s.png", tr, 1, sample_stream(0, k), x.data(), y.data());
        for (int i = 0; i < size * size; ++i) REQUIRE(source.count(y[(size_t)i]) == 1);
      }
    }
}

TEST_CASE("segmentation source: bad samples are left out and reported once per file with the reason") {
  TempDir t;
  write_pair(t, "a_good", 16, 16, 1, {0, 1, 2});
  write_bytes(t / "images/b_nomask.png", encode_png(synth_photo(16, 16, 2)));
  write_pair(t, "c_size", 16, 16, 3, {0, 1});
  write_bytes(t / "masks/c_size.png", encode_png(flat_mask(12, 16, 1)));
  write_pair(t, "d_class", 16, 16, 4, {0, 5});
  write_bytes(t / "images/e_broken.png", "definitely not a png");
  write_bytes(t / "masks/e_broken.png", encode_png(flat_mask(16, 16, 0)));
  write_pair(t, "f_rgbmask", 16, 16, 6, {0, 1});
  write_bytes(t / "masks/f_rgbmask.png", encode_png(synth_photo(16, 16, 6)));
  auto src = make_segmentation_source(segmentation_folder(t.path), opts("16", "none"), ImageSizeSchedule::parse("16"),
                                      kZero, kOne, 3, 0, Device::cpu());
  std::vector<SourceBatch> v = all_batches(*src, 0, 8, false);
  REQUIRE(v.size() == 1);
  CHECK(v[0].indices == std::vector<int64_t>{0});
  CHECK(v[0].x.sizes() == Shape{1, 3, 16, 16});
  CHECK(v[0].y.sizes() == Shape{1, 16, 16});
  CHECK(v[0].y.dtype() == DType::i64);
  std::vector<std::string> r = src->take_bad_reports();
  REQUIRE(r.size() == 5);
  auto has = [&](const std::string& a, const std::string& b) {
    for (const std::string& s : r)
      if (s.find(a) != std::string::npos && s.find(b) != std::string::npos) return true;
    return false;
  };
  CHECK(has("b_nomask.png", "no mask"));
  CHECK(has("c_size.png", "16x16 but its mask"));
  CHECK(has("d_class.png", "class 5"));
  CHECK(has("e_broken.png", "images/e_broken.png"));
  CHECK(has("f_rgbmask.png", "RGB"));
  CHECK(src->bad_count() == 5);
  all_batches(*src, 1, 8, false);
  CHECK(src->take_bad_reports().empty());  // once per run
  // Training keeps a batch whose every sample is bad as an empty step (its position counts).
  std::vector<SourceBatch> tr = all_batches(*src, 0, 1, true);
  CHECK(tr.size() == 6);
  int empty = 0;
  for (const SourceBatch& b : tr) empty += b.x.size(0) == 0;
  CHECK(empty == 5);
}

TEST_CASE("segmentation source: same seed same batches, any worker count, skip_batches resumes exactly") {
  TempDir t;
  for (int i = 0; i < 11; ++i) write_pair(t, "s" + std::to_string(i), 40, 32, i, {0, 1, 2, 3});
  auto make = [&](int workers) {
    return make_segmentation_source(segmentation_folder(t.path), opts("24", "rrc", workers),
                                    ImageSizeSchedule::parse("24"), kZero, kOne, 4, 42, Device::cpu());
  };
  auto a = make(1), b = make(3), c = make(2);
  std::vector<SourceBatch> va = all_batches(*a, 2, 3, true), vb = all_batches(*b, 2, 3, true);
  REQUIRE(va.size() == 4);
  REQUIRE(vb.size() == 4);
  for (size_t i = 0; i < va.size(); ++i) {
    CHECK(va[i].indices == vb[i].indices);
    CHECK(same(va[i].x, vb[i].x));
    CHECK(same(va[i].y, vb[i].y));
  }
  std::vector<SourceBatch> vc = all_batches(*c, 2, 3, true, 2);
  REQUIRE(vc.size() == 2);
  CHECK(vc[0].indices == va[2].indices);
  CHECK(same(vc[0].x, va[2].x));
  CHECK(same(vc[1].y, va[3].y));
  // Another epoch shuffles and crops differently.
  std::vector<SourceBatch> e3 = all_batches(*a, 3, 3, true);
  CHECK_FALSE((e3[0].indices == va[0].indices && same(e3[0].x, va[0].x)));
  // Validation is in data set order and not augmented: two epochs give the same batches.
  std::vector<SourceBatch> v0 = all_batches(*a, 0, 4, false), v1 = all_batches(*a, 5, 4, false);
  CHECK(v0[0].indices == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(same(v0[1].x, v1[1].x));
  CHECK(same(v0[2].y, v1[2].y));
}

namespace {

// The whole training batches of `whole` against those that `ranks` sharded copies deliver (DataSource::shard
// with `accum`): each rank's batch split by its micro_rows (one piece when accum is 1), the pieces joined
// micro-batch by micro-batch in rank order, must be the whole batch's rows: the same samples, pixels and masks.
void check_shards(const std::function<std::unique_ptr<DataSource>()>& make, int64_t epoch, int64_t batch) {
  const std::vector<SourceBatch> whole = all_batches(*make(), epoch, batch, true);
  for (int64_t accum : {1, 2})
    for (int ranks : {2, 3}) {
      CAPTURE(accum);
      CAPTURE(ranks);
      std::vector<std::vector<SourceBatch>> of_rank;
      for (int r = 0; r < ranks; ++r) {
        std::unique_ptr<DataSource> src = make();
        REQUIRE(src->shard(r, ranks, accum));
        of_rank.push_back(all_batches(*src, epoch, batch, true));
        REQUIRE(of_rank.back().size() == whole.size());  // every global batch, empty shares included
      }
      for (size_t b = 0; b < whole.size(); ++b) {
        std::vector<int64_t> indices;
        std::vector<Tensor> xs, ys;
        std::vector<std::vector<int64_t>> micro((size_t)ranks);
        size_t pieces = 0;
        for (int r = 0; r < ranks; ++r) {
          const SourceBatch& sb = of_rank[(size_t)r][b];
          micro[(size_t)r] = accum == 1 ? std::vector<int64_t>{sb.x.size(0)} : sb.micro_rows;
          if (accum == 1) CHECK(sb.micro_rows.empty());
          pieces = std::max(pieces, micro[(size_t)r].size());
        }
        std::vector<int64_t> at((size_t)ranks, 0);
        for (size_t m = 0; m < pieces; ++m)
          for (int r = 0; r < ranks; ++r) {
            REQUIRE(micro[(size_t)r].size() == pieces);  // a share of every micro-batch, maybe empty
            const SourceBatch& sb = of_rank[(size_t)r][b];
            const int64_t n = micro[(size_t)r][m];
            for (int64_t k = 0; k < n; ++k) {
              indices.push_back(sb.indices[(size_t)(at[(size_t)r] + k)]);
              xs.push_back(narrow(sb.x, 0, at[(size_t)r] + k, 1));
              ys.push_back(narrow(sb.y, 0, at[(size_t)r] + k, 1));
            }
            at[(size_t)r] += n;
          }
        CHECK_MESSAGE(indices == whole[b].indices, "batch ", b);
        REQUIRE((int64_t)xs.size() == whole[b].x.size(0));
        for (size_t k = 0; k < xs.size(); ++k) {
          CHECK_MESSAGE(same(contiguous(xs[k]), contiguous(narrow(whole[b].x, 0, (int64_t)k, 1))), "batch ", b, " row ", k);
          CHECK_MESSAGE(same(contiguous(ys[k]), contiguous(narrow(whole[b].y, 0, (int64_t)k, 1))), "batch ", b, " row ", k);
        }
      }
    }
}

}  // namespace

TEST_CASE("segmentation sources shard: a data-parallel rank's rows of every global batch, the same pixels and masks") {
  // A folder of image/mask pairs with --augment rrc (the draws follow each sample's place in the epoch, not
  // the rank's) and one bad pair (left out of its rank's share), and a mask-array folder; 11 and 13 samples
  // in batches of 5: short last batches, with 3 ranks some shares empty. Fails when a sharded sample's
  // augmentation stream is its place in the rank's batch (checked).
  TempDir t;
  for (int i = 0; i < 10; ++i) write_pair(t, "s" + std::to_string(i), 40, 32, i, {0, 1, 2, 3});
  write_bytes(t / "images/s_nomask.png", encode_png(synth_photo(40, 32, 2)));
  check_shards(
      [&] {
        return make_segmentation_source(segmentation_folder(t.path), opts("24", "rrc", 2), ImageSizeSchedule::parse("24"),
                                        kZero, kOne, 4, 42, Device::cpu());
      },
      2, 5);
  MaskArrayDataset d;
  d.source = "npy-masks:test";
  d.n = 13;
  d.channels = 1;
  d.height = d.width = 4;
  for (int64_t i = 0; i < d.n * 16; ++i) {
    d.images.push_back((float)i * 0.5f);
    d.masks.push_back(i % 3);
  }
  check_shards([&] { return make_mask_array_source(d, 7, Device::cpu()); }, 1, 5);
}

TEST_CASE("segmentation train data: class count from the masks, classes.txt or --num-classes") {
  TempDir t;
  write_pair(t, "train/a", 16, 16, 1, {0, 2});
  write_pair(t, "train/b", 16, 16, 2, {0, 4, 255});
  write_pair(t, "val/c", 16, 16, 3, {0, 1});
  // write_pair puts the files under images/ and masks/ of the stem's folder: move them into splits.
  namespace fs = std::filesystem;
  for (const char* split : {"train", "val"}) {
    fs::create_directories(t / split);
    for (const char* kind : {"images", "masks"})
      fs::rename(t / (std::string(kind) + "/" + split), t / (std::string(split) + "/" + kind));
  }
  fs::remove(t / "images");
  fs::remove(t / "masks");
  CHECK(is_segmentation_data(t.path));
  SegmentationDataOptions o;
  o.data = t.path;
  o.image = opts("16", "flip");
  TrainData d = open_segmentation_train_data(o, Device::cpu());
  CHECK(d.format == "segment");
  CHECK(d.num_classes == 5);  // the largest value 4 (255 aside) + 1
  CHECK(d.classes == std::vector<std::string>{"0", "1", "2", "3", "4"});
  bool noted = false;
  for (const std::string& n : d.notes) noted = noted || n.find("scanned at open") != std::string::npos;
  CHECK(noted);
  REQUIRE(d.val);
  CHECK(d.train->size() == 2);
  CHECK(d.val->size() == 1);
  CHECK(d.ledger["format"] == "segment");
  CHECK(d.ledger["ignore_index"] == 255);
  SourceBatch b;
  d.train->start_epoch(0, 2, true);
  REQUIRE(d.train->next(&b));
  CHECK(b.y.sizes() == Shape{2, 16, 16});
  o.num_classes = 9;
  CHECK(open_segmentation_train_data(o, Device::cpu()).num_classes == 9);
  o.num_classes = 0;
  write_bytes(t / "classes.txt", "bg\none\ntwo\nthree\nfour\nfive\n");
  TrainData named = open_segmentation_train_data(o, Device::cpu());
  CHECK(named.num_classes == 6);
  CHECK(named.classes.back() == "five");
  o.num_classes = 4;
  CHECK_THROWS_WITH_AS(open_segmentation_train_data(o, Device::cpu()), doctest::Contains("classes.txt"), Error);
  o.num_classes = 0;
  o.image.balance = true;
  CHECK_THROWS_WITH_AS(open_segmentation_train_data(o, Device::cpu()), doctest::Contains("--balance"), Error);
}

TEST_CASE("segmentation predict data: images only, from a folder or a segmentation folder's images") {
  TempDir t;
  write_pair(t, "a", 20, 20, 1, {0, 1});
  write_pair(t, "b", 20, 20, 2, {0, 1});
  ImageOptions o = opts("16", "none");
  auto s = open_segmentation_predict_data(t.path, o, Device::cpu());
  CHECK(s->size() == 2);
  CHECK(s->path(1) == t / "images/b.png");
  std::vector<SourceBatch> v = all_batches(*s, 0, 4, false);
  REQUIRE(v.size() == 1);
  CHECK(v[0].x.sizes() == Shape{2, 3, 16, 16});
  auto plain = open_segmentation_predict_data(t / "images", o, Device::cpu());
  CHECK(plain->size() == 2);
  o.normalize = "auto";
  CHECK_THROWS_AS(open_segmentation_predict_data(t.path, o, Device::cpu()), Error);
}
