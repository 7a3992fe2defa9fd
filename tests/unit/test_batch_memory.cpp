// --batch-memory's pieces (data/batch_plan.h, tools/batch_memory.h, data/bucketed_image_source.h): the
// bucketing rule, the epoch plan (every image once per epoch, one bucket per batch, batches of all
// buckets mixed, a pure function of (seed, epoch)), the batch search, and the bucketed source over
// real JPEGs (each batch at its bucket's size; a start past k batches gives the same later batches,
// pixels and augmentation included). End to end: tests/slow/test_batch_memory_cli.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "data/batch_plan.h"
#include "data/bucketed_image_source.h"
#include "data/jpeg_encode.h"
#include "support/cli/run_kiln.h"
#include "engine/run/batch_memory.h"
#include "engine/run/resume_check.h"

TEST_CASE("batch plan: buckets by the shorter side rounded down to 32 px") {
  CHECK(kiln::bucket_size_for(64, 80) == 64);
  CHECK(kiln::bucket_size_for(500, 100) == 96);
  CHECK(kiln::bucket_size_for(20, 20) == 32);  // scaled up to the smallest bucket
  CHECK(kiln::bucket_size_for(700, 512) == 512);
  CHECK(kiln::bucket_size_for(511, 600) == 480);
}

TEST_CASE("batch plan: every image once per epoch, one bucket per batch, mixed order, a pure function of (seed, epoch)") {
  std::vector<kiln::SizeBucket> b(3);
  size_t next = 0;
  const int sizes[3] = {64, 128, 512};
  const int64_t counts[3] = {23, 10, 5}, batches[3] = {8, 3, 1};
  for (int k = 0; k < 3; ++k) {
    b[k].size = sizes[k];
    b[k].batch = batches[k];
    for (int64_t i = 0; i < counts[k]; ++i) b[k].members.push_back(next++);
  }
  CHECK(kiln::planned_batches(b) == 3 + 4 + 5);
  const auto p0 = kiln::plan_epoch(b, 7, 0, true);
  REQUIRE(p0.size() == 12);
  std::set<size_t> seen;
  for (const kiln::PlannedStep& s : p0) {
    REQUIRE(s.bucket < 3);
    CHECK(!s.indices.empty());
    CHECK((int64_t)s.indices.size() <= b[s.bucket].batch);
    for (size_t i : s.indices) {
      CHECK(seen.insert(i).second);
      const auto& m = b[s.bucket].members;
      CHECK(std::find(m.begin(), m.end(), i) != m.end());
    }
  }
  CHECK(seen.size() == next);
  auto buckets_of = [](const std::vector<kiln::PlannedStep>& p) {
    std::vector<size_t> v;
    for (const auto& s : p) v.push_back(s.bucket);
    return v;
  };
  auto flat = [](const std::vector<kiln::PlannedStep>& p) {
    std::vector<size_t> v;
    for (const auto& s : p) v.insert(v.end(), s.indices.begin(), s.indices.end());
    return v;
  };
  // Same inputs, same plan; another epoch or seed, another order (of 12 batches and 38 images).
  CHECK(flat(kiln::plan_epoch(b, 7, 0, true)) == flat(p0));
  CHECK(buckets_of(kiln::plan_epoch(b, 7, 0, true)) == buckets_of(p0));
  CHECK(flat(kiln::plan_epoch(b, 7, 1, true)) != flat(p0));
  CHECK(flat(kiln::plan_epoch(b, 8, 0, true)) != flat(p0));
  std::vector<size_t> sorted_buckets = buckets_of(p0);
  std::sort(sorted_buckets.begin(), sorted_buckets.end());
  CHECK(buckets_of(p0) != sorted_buckets);  // the buckets' batches are interleaved
  // Evaluation: buckets in order, members in data set order.
  std::vector<size_t> all(next);
  for (size_t i = 0; i < next; ++i) all[i] = i;
  CHECK(flat(kiln::plan_epoch(b, 7, 0, false)) == all);
  b[1].batch = 0;
  CHECK_THROWS_AS(kiln::planned_batches(b), kiln::Error);
}

TEST_CASE("batch memory: the largest fitting batch from a guess, galloping and bisecting, capped at the bucket's images") {
  for (int64_t limit : {1, 2, 3, 37, 64, 100, 1000}) {
    for (int64_t guess : {1, 2, 36, 37, 38, 90, 500}) {
      CAPTURE(limit);
      CAPTURE(guess);
      int probes = 0;
      auto fits = [&](int64_t b) {
        ++probes;
        REQUIRE(b >= 1);
        REQUIRE(b <= 100);  // never past the cap
        return b <= limit;
      };
      CHECK(kiln::largest_fitting_batch(100, fits, guess) == std::min<int64_t>(limit, 100));
      CHECK(probes <= 20);
    }
  }
  int probes = 0;
  CHECK(kiln::largest_fitting_batch(100, [&](int64_t b) { return ++probes, b <= 37; }, 37) == 37);
  CHECK(probes == 3);  // 1, the guess, the guess + 1
  CHECK(kiln::largest_fitting_batch(20, [](int64_t b) { return b <= 37; }) == 20);
  CHECK(kiln::largest_fitting_batch(20, [](int64_t) { return false; }) == 0);
}


TEST_CASE("bucketed image source: one size per batch, every image once, a skipped start gives the same later batches") {
  namespace fs = std::filesystem;
  const std::string root = kiln_test::cli_temp_dir("bucketed_source");
  int n = 0;
  for (int k = 0; k < 2; ++k) {
    const fs::path dir = fs::path(root) / "data" / ("c" + std::to_string(k));
    fs::create_directories(dir);
    int i = 0;
    for (int s : {40, 64, 64, 70, 64, 100, 96, 130, 64, 64}) {  // buckets 32, 64, 96, 128
      kiln::Image im;
      im.w = s + (i % 2) * 9;  // some wider than tall: the shorter side decides
      im.h = s;
      im.c = 3;
      im.px.resize((size_t)im.w * im.h * 3);
      for (size_t p = 0; p < im.px.size(); ++p) im.px[p] = (uint8_t)((p * 7 + (size_t)i * 31 + (size_t)k * 101) % 251);
      kiln::write_jpeg((dir / (std::to_string(i++) + ".jpg")).string(), im, 90);
      ++n;
    }
  }
  kiln::ImageDataOptions o;
  o.data = root + "/data";
  o.image.workers = 2;
  o.image.augment = "rrc";  // the augmentation draws too must follow the plan
  o.seed = 11;
  kiln::TrainData t = kiln::open_bucketed_image_train_data(o, kiln::Device::cpu());
  auto& src = dynamic_cast<kiln::BucketedImageSource&>(*t.train);
  std::vector<int> sizes;
  for (const auto& b : src.buckets()) sizes.push_back(b.size);
  CHECK(sizes == std::vector<int>{32, 64, 96, 128});
  src.set_batches({1, 3, 2, 1});
  REQUIRE(src.planned_steps_per_epoch() == 2 + 4 + 2 + 2);  // 2, 12, 4 and 2 images
  auto epoch = [&](int64_t skip) {
    std::vector<kiln::SourceBatch> v;
    CHECK(src.start_epoch(1, 999, true) == 10);
    src.skip_batches(skip);
    kiln::SourceBatch b;
    while (src.next(&b)) {
      const int size = src.buckets()[src.current_bucket()].size;
      CHECK(b.x.size(2) == size);
      CHECK(b.x.size(3) == size);
      CHECK(b.x.size(0) <= src.buckets()[src.current_bucket()].batch);
      v.push_back(b);
      b = kiln::SourceBatch();
    }
    return v;
  };
  const std::vector<kiln::SourceBatch> all = epoch(0), rest = epoch(4);
  REQUIRE(all.size() == 10);
  REQUIRE(rest.size() == 6);
  std::set<int64_t> seen;
  for (const auto& b : all)
    for (int64_t i : b.indices) CHECK(seen.insert(i).second);
  CHECK((int)seen.size() == n);
  for (size_t j = 0; j < rest.size(); ++j) {
    CHECK(rest[j].indices == all[j + 4].indices);
    CHECK(rest[j].x.to_vector<float>() == all[j + 4].x.to_vector<float>());
  }
}

TEST_CASE("--resume: a different --batch-memory is a difference that restarts the interrupted epoch") {
  kiln::RunConfig saved, now;
  saved.batch_memory = "300M";
  now.batch_memory = "300M";
  CHECK(kiln::resume_differences(saved.to_json(), now).empty());
  now.batch_memory = "1G";
  std::vector<std::string> d = kiln::resume_differences(saved.to_json(), now);
  REQUIRE(d.size() == 1);
  CHECK(d[0] == "batch_memory: saved 300M, now 1G");
  now.batch_memory = "";  // back to a fixed --batch
  d = kiln::resume_differences(saved.to_json(), now);
  REQUIRE(d.size() == 1);
  CHECK(d[0].rfind("batch_memory: saved 300M, now ", 0) == 0);
  // A state saved before --batch-memory existed (no key) against a run without it: no difference.
  nlohmann::json old = kiln::RunConfig().to_json();
  old.erase("batch_memory");
  CHECK(kiln::resume_differences(old, kiln::RunConfig()).empty());
}
