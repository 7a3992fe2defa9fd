// --batch-memory's pieces (data/batch_plan.h, tools/batch_memory.h): the bucketing rule, the epoch
// plan (every image once per epoch, one bucket per batch, batches of all buckets mixed, a pure
// function of (seed, epoch)) and the batch search. End to end: tests/slow/test_batch_memory_cli.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "data/batch_plan.h"
#include "tools/batch_memory.h"

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

