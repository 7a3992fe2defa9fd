// ImageLoader: same batches whatever the worker count, bad samples skipped/counted/reported once,
// caller-supplied buffers all released, 1-channel f16 output, epochs reshuffle, an epoch started
// mid-way.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <map>

#include "data/image_loader.h"
#include "data/jpeg_encode.h"
#include "test_data_support.h"

using namespace kiln;
using namespace kiln_test;

namespace {

struct Folder {
  TempDir dir;
  Folder() {
    for (int i = 0; i < 23; ++i) {
      std::string cls = i % 3 == 0 ? "a" : (i % 3 == 1 ? "b" : "c");
      write_bytes(dir / (cls + "/img" + std::to_string(i) + ".jpg"),
                  encode_jpeg(synth_photo(60 + i * 3, 50 + (i * 7) % 30, i), 85));
    }
    write_bytes(dir / "b/zz_empty.jpg", "");
    std::string trunc = encode_jpeg(synth_photo(64, 64, 99), 85);
    write_bytes(dir / "c/zz_trunc.jpg", trunc.substr(0, trunc.size() / 3));
  }
};

struct Collected {
  std::vector<std::vector<float>> data;
  std::vector<std::vector<int64_t>> labels;
  std::vector<std::vector<std::string>> paths;
};

Collected run(ImageLoader& L, uint64_t epoch) {
  Collected c;
  L.start_epoch(epoch);
  ImageBatch b;
  while (L.next(b)) {
    const float* p = b.f32();
    REQUIRE(p != nullptr);
    c.data.emplace_back(p, p + b.n * b.c * b.h * b.w);
    c.labels.push_back(b.labels);
    c.paths.push_back(b.paths);
    CHECK(b.labels.size() == (size_t)b.n);
  }
  return c;
}

ImageLoaderOptions train_options(int workers) {
  ImageLoaderOptions o;
  o.batch_size = 5;
  o.workers = workers;
  o.prefetch_batches = 2;
  o.seed = 1234;
  o.sampler.kind = SamplerKind::random;
  o.sampler.seed = 77;
  o.transform.kind = SampleTransform::Kind::random_resized_crop;
  o.transform.random_hflip = true;
  o.transform.out_w = 32;
  o.transform.out_h = 24;
  o.on_bad_sample = [](const std::string&, const std::string&) {};
  return o;
}

}  // namespace

TEST_CASE("loader: same batches with 1, 2 and 4 workers, bad samples skipped and reported once") {
  Folder f;
  ImageDataset ds = image_folder(f.dir.path);
  REQUIRE(ds.size() == 25);
  std::vector<Collected> runs;
  for (int w : {1, 2, 4}) {
    std::vector<std::string> reported;
    std::mutex mu;
    ImageLoaderOptions o = train_options(w);
    o.on_bad_sample = [&](const std::string& p, const std::string& r) {
      std::lock_guard<std::mutex> g(mu);
      reported.push_back(p + ": " + r);
    };
    ImageLoader L(ds, o);
    CHECK(L.workers() == w);
    runs.push_back(run(L, 0));
    CHECK(L.bad_count() == 2);
    CHECK(L.samples_done() == 25);
    CHECK(L.bad_samples().size() == 2);
    Collected again = run(L, 0);  // same epoch again: same data, bad files not re-reported
    CHECK(again.data == runs.back().data);
    CHECK(L.bad_count() == 4);
    CHECK(reported.size() == 2);
    for (auto& r : reported) CHECK((r.find("zz_empty.jpg: empty file") != std::string::npos ||
                                    r.find("zz_trunc.jpg: truncated") != std::string::npos));
  }
  for (size_t k = 1; k < runs.size(); ++k) {
    CHECK(runs[k].data == runs[0].data);
    CHECK(runs[k].labels == runs[0].labels);
    CHECK(runs[k].paths == runs[0].paths);
  }
  size_t total = 0, shorter = 0;
  for (auto& p : runs[0].paths) {
    total += p.size();
    if (p.size() < 5) ++shorter;
    for (auto& s : p) CHECK(s.find("zz_") == std::string::npos);
  }
  CHECK(total == 23);
  CHECK(shorter >= 1);  // 25 samples in batches of 5, 2 bad: at least one batch came out smaller
}

TEST_CASE("loader: epochs reshuffle and re-augment, the sequential sampler keeps data set order") {
  Folder f;
  ImageDataset ds = image_folder(f.dir.path);
  ImageLoader L(ds, train_options(2));
  Collected e0 = run(L, 0), e1 = run(L, 1);
  CHECK(e0.paths != e1.paths);
  ImageLoaderOptions o = train_options(2);
  o.sampler.kind = SamplerKind::sequential;
  o.transform.kind = SampleTransform::Kind::resize_center_crop;
  o.transform.resize = 40;
  o.transform.random_hflip = false;
  ImageLoader S(ds, o);
  Collected s0 = run(S, 0), s1 = run(S, 1);
  CHECK(s0.data == s1.data);  // no randomness left
  std::vector<std::string> flat;
  for (auto& p : s0.paths) flat.insert(flat.end(), p.begin(), p.end());
  std::vector<std::string> expect;
  for (auto& s : ds.samples)
    if (s.path.find("zz_") == std::string::npos) expect.push_back(s.path);
  CHECK(flat == expect);
}

TEST_CASE("loader: an epoch started at batch 2 (a resumed run) gives the whole epoch's batches from 2 on") {
  Folder f;
  ImageDataset ds = image_folder(f.dir.path);
  ImageLoader L(ds, train_options(2));
  Collected whole = run(L, 1);
  REQUIRE(whole.data.size() == 5);
  L.start_epoch(1, 2);
  Collected rest;
  ImageBatch b;
  while (L.next(b)) {
    rest.data.emplace_back(b.f32(), b.f32() + b.n * b.c * b.h * b.w);
    rest.paths.push_back(b.paths);
  }
  REQUIRE(rest.data.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(rest.paths[i] == whole.paths[i + 2]);
    CHECK(rest.data[i] == whole.data[i + 2]);  // the same augmentation draws
  }
  CHECK(L.samples_done() <= 15);  // batches 0 and 1 were not decoded
  L.start_epoch(1, 9);
  CHECK(!L.next(b));
}

TEST_CASE("loader: caller buffers, 1-channel f16 output, drop_last, abandoning an epoch") {
  Folder f;
  ImageDataset ds = image_folder(f.dir.path);
  std::atomic<int> allocs{0}, releases{0};
  ImageLoaderOptions o = train_options(3);
  o.transform.channels = 1;
  o.transform.dtype = PixelDType::f16;
  o.drop_last = true;
  o.batch_size = 4;
  o.alloc = [&](size_t bytes) {
    ++allocs;
    return std::malloc(bytes);
  };
  o.release = [&](void* p, size_t) {
    ++releases;
    std::free(p);
  };
  {
    ImageLoader L(ds, o);
    L.start_epoch(0);
    CHECK(L.batches_per_epoch() == 6);  // 25 / 4, last partial dropped
    ImageBatch b;
    int n = 0;
    while (L.next(b)) {
      CHECK(b.c == 1);
      CHECK(b.f16() != nullptr);
      CHECK(b.f32() == nullptr);
      ++n;
    }
    CHECK(n >= 5);
    b = ImageBatch{};
    L.start_epoch(1);
    CHECK(L.next(b));  // take one batch, then abandon the epoch by destroying the loader
  }
  CHECK(allocs.load() > 0);
  CHECK(allocs.load() == releases.load());
}

TEST_CASE("loader: an empty data set is one clear error") {
  ImageDataset ds;
  ds.root = "/some/where";
  try {
    ImageLoader L(ds, ImageLoaderOptions{});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("/some/where") != std::string::npos);
  }
}

TEST_CASE("loader: a data-parallel rank's share: its rows of every global batch, the same pixels, decoded by it alone") {
  // The whole batches (no shard) against 2 and 7 ranks' shares (7 > batch 5: two ranks get no row of a
  // batch and still deliver it, empty), without and with --accum 2 (a rank's rows are then its shares of
  // the batch's 2 micro-batches of 3 and 2 rows, micro_rows counting each). Every row a rank delivers is
  // the row the whole batch has for that file (same augmentation: the draws follow the sample's place in
  // the epoch, not the rank's), the ranks' shares of each micro-batch in rank order are the whole batch,
  // and a rank decodes (and meets the bad files of) its share only.
  Folder f;
  ImageDataset ds = image_folder(f.dir.path);
  ImageLoaderOptions whole_o = train_options(2);
  whole_o.keep_empty_batches = true;
  ImageLoader whole(ds, whole_o);
  const Collected all = run(whole, 3);
  REQUIRE(whole.batches_per_epoch() == 5);
  for (int64_t accum : {1, 2})
    for (int ranks : {2, 7}) {
      const size_t pieces = accum == 1 ? 1 : 2;
      // per batch, micro-batch and rank: the paths and rows delivered
      std::vector<std::vector<std::vector<std::vector<std::string>>>> paths(
          5, std::vector<std::vector<std::vector<std::string>>>(pieces,
                                                                std::vector<std::vector<std::string>>((size_t)ranks)));
      std::vector<std::vector<std::vector<std::vector<std::vector<float>>>>> rows(
          5, std::vector<std::vector<std::vector<std::vector<float>>>>(
                 pieces, std::vector<std::vector<std::vector<float>>>((size_t)ranks)));
      size_t decoded = 0, bad = 0;
      for (int r = 0; r < ranks; ++r) {
        ImageLoaderOptions o = train_options(2);
        o.keep_empty_batches = true;
        o.shard_rank = r;
        o.shard_ranks = ranks;
        o.shard_accum = accum;
        ImageLoader L(ds, o);
        L.start_epoch(3);
        ImageBatch b;
        size_t batches = 0;
        while (L.next(b)) {
          REQUIRE(b.index < 5);
          CHECK(b.index == batches);
          ++batches;
          CHECK(b.n <= (ranks == 2 ? 3 : accum == 1 ? 1 : 2));  // the largest share of a batch of 5
          std::vector<int64_t> micro = b.micro_rows;
          if (accum == 1) {
            CHECK(micro.empty());
            micro = {b.n};
          }
          REQUIRE(micro.size() == pieces);  // a share of every micro-batch, maybe empty
          const size_t per = (size_t)(b.c * b.h * b.w);
          int64_t k = 0;
          for (size_t m = 0; m < pieces; ++m)
            for (int64_t i = 0; i < micro[m]; ++i, ++k) {
              paths[b.index][m][(size_t)r].push_back(b.paths[(size_t)k]);
              rows[b.index][m][(size_t)r].emplace_back(b.f32() + (size_t)k * per, b.f32() + (size_t)(k + 1) * per);
            }
          CHECK(k == b.n);
        }
        CHECK(batches == 5);  // every global batch, empty shares included
        decoded += L.samples_done();
        bad += L.bad_count();
      }
      CHECK(decoded == 25);  // each sample decoded by one rank only
      CHECK(bad == 2);
      for (size_t b = 0; b < 5; ++b) {
        std::vector<std::string> joined;
        std::vector<std::vector<float>> joined_rows;
        for (size_t m = 0; m < pieces; ++m)
          for (int r = 0; r < ranks; ++r) {
            joined.insert(joined.end(), paths[b][m][(size_t)r].begin(), paths[b][m][(size_t)r].end());
            joined_rows.insert(joined_rows.end(), rows[b][m][(size_t)r].begin(), rows[b][m][(size_t)r].end());
          }
        CHECK_MESSAGE(joined == all.paths[b], ranks, " ranks, accum ", accum, ", batch ", b);
        REQUIRE(joined_rows.size() == all.paths[b].size());
        const size_t per = all.data[b].size() / std::max<size_t>(1, all.paths[b].size());
        for (size_t k = 0; k < joined_rows.size(); ++k)
          CHECK_MESSAGE(std::vector<float>(all.data[b].begin() + (long)(k * per),
                                           all.data[b].begin() + (long)((k + 1) * per)) == joined_rows[k],
                        ranks, " ranks, accum ", accum, ", batch ", b, " row ", k);
      }
    }
}
