// Images that change under a running loader (issue 14): deleted, truncated, replaced by a
// directory or emptied between epochs, or while an epoch runs, are skipped and reported like any
// bad file, and the run goes on with the others. Deterministic: the files change between epochs,
// or, inside an epoch, while the consumer holds batch 0 with one worker and a prefetch window of
// one batch (batch 2 cannot have been read yet); no sleeps, no races. 12 small JPEGs, well under a
// second.
#include <doctest/doctest.h>

#include <filesystem>
#include <map>
#include <mutex>

#include "data/decode.h"
#include "data/image_loader.h"
#include "data/jpeg_encode.h"
#include "test_data_support.h"

using namespace kiln;
using namespace kiln_test;
namespace fs = std::filesystem;

namespace {

// a/img00.jpg .. a/img11.jpg (one class: the order of the sequential sampler is the file order).
struct Twelve {
  TempDir dir;
  std::vector<std::string> paths;
  Twelve() {
    for (int i = 0; i < 12; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "a/img%02d.jpg", i);
      paths.push_back(dir / name);
      write_bytes(paths.back(), encode_jpeg(synth_photo(40, 36, i), 85));
    }
  }
  // Deleted, truncated to a third, replaced by a directory, emptied.
  void spoil(int deleted, int truncated, int directory, int emptied) {
    fs::remove(paths[(size_t)deleted]);
    const std::string jpg = encode_jpeg(synth_photo(40, 36, truncated), 85);
    write_bytes(paths[(size_t)truncated], jpg.substr(0, jpg.size() / 3));
    fs::remove(paths[(size_t)directory]);
    fs::create_directories(paths[(size_t)directory]);
    write_bytes(paths[(size_t)emptied], "");
  }
};

struct Epoch {
  size_t samples = 0, batches = 0;
  std::vector<std::string> paths;
};

ImageLoaderOptions options(std::map<std::string, std::string>* reported, std::mutex* mu) {
  ImageLoaderOptions o;
  o.batch_size = 3;
  o.workers = 1;
  o.prefetch_batches = 1;
  o.transform.out_w = o.transform.out_h = 16;
  o.on_bad_sample = [reported, mu](const std::string& p, const std::string& r) {
    std::lock_guard<std::mutex> g(*mu);
    (*reported)[p] = r;
  };
  return o;
}

}  // namespace

TEST_CASE("vanishing files: deleted, truncated, a directory or empty between epochs are skipped and reported") {
  Twelve f;
  std::map<std::string, std::string> reported;
  std::mutex mu;
  ImageLoader L(image_folder(f.dir.path), options(&reported, &mu));
  auto run = [&](uint64_t epoch) {
    Epoch e;
    L.start_epoch(epoch);
    ImageBatch b;
    while (L.next(b)) {
      ++e.batches;
      e.samples += (size_t)b.n;
      e.paths.insert(e.paths.end(), b.paths.begin(), b.paths.end());
    }
    return e;
  };
  const Epoch first = run(0);
  CHECK(first.samples == 12);
  CHECK(L.bad_count() == 0);
  f.spoil(1, 4, 7, 10);
  const Epoch second = run(1);
  CHECK(second.samples == 8);
  CHECK(second.batches == 4);  // each batch of 3 lost one sample, none was dropped
  CHECK(L.bad_count() == 4);
  REQUIRE(reported.size() == 4);
  CHECK(reported[f.paths[1]].find("cannot open (No such file or directory)") != std::string::npos);
  CHECK(reported[f.paths[7]] == "is a directory, not an image file");
  CHECK(reported[f.paths[10]].find("empty") != std::string::npos);
  CHECK_FALSE(reported[f.paths[4]].empty());  // the decoder's reason for the truncated JPEG
  for (int i : {1, 4, 7, 10})
    CHECK(std::find(second.paths.begin(), second.paths.end(), f.paths[(size_t)i]) == second.paths.end());
}

TEST_CASE("vanishing files: changed while an epoch runs, the loader skips them and goes on") {
  Twelve f;
  std::map<std::string, std::string> reported;
  std::mutex mu;
  ImageLoader L(image_folder(f.dir.path), options(&reported, &mu));
  L.start_epoch(0);
  ImageBatch b;
  REQUIRE(L.next(b));  // batch 0 (files 0..2); the window lets the worker read batch 1 only
  CHECK(b.n == 3);
  f.spoil(6, 7, 8, 9);  // batch 2 (6, 7, 8) and the first file of batch 3 (9, 10, 11)
  size_t samples = (size_t)b.n, batches = 1;
  while (L.next(b)) {
    ++batches;
    samples += (size_t)b.n;
  }
  CHECK(batches == 3);  // batch 2 lost all three samples: skipped; batches 1 and 3 arrive
  CHECK(samples == 3 + 3 + 2);
  CHECK(L.bad_count() == 4);
  CHECK(reported.size() == 4);
  CHECK(reported[f.paths[8]] == "is a directory, not an image file");
}

TEST_CASE("vanishing files: read_file_bytes names a directory instead of reporting a bogus size") {
  TempDir d;
  fs::create_directories(d / "sub.jpg");
  try {
    read_file_bytes(d / "sub.jpg", 1 << 20);
    FAIL("no error for a directory");
  } catch (const DecodeError& e) {
    CHECK(e.reason() == "is a directory, not an image file");
  }
}
