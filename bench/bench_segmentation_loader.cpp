// bench_segmentation_loader: what the masks cost. The segmentation source (image + mask PNG decode,
// one crop/flip for both, nearest-neighbour mask, x (B, C, S, S) f32 + y (B, S, S) i64) against
// its peer in the same run: kiln's ImageLoader on the same image files with the same transform and
// no masks. Each at 1 and 2 worker threads, nothing consuming the batches but the loop, best of 3
// epochs.
//
// Usage: bench_segmentation_loader FOLDER [--size S] [--channels 1|3] [--batch B] [--augment]
// FOLDER: a segmentation folder (train/ used when there), e.g. `kiln export-images --segmentation`.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "data/image_loader.h"
#include "data/segmentation_source.h"

#include "bench/bench_cli.h"

using namespace kiln;

int main(int argc, char** argv) {
  CLI::App app{"bench_segmentation_loader: the segmentation source (image + mask) against kiln's ImageLoader on "
               "the same images without masks, at 1 and 2 worker threads"};
  app.name("bench_segmentation_loader");
  std::string root;
  int size = 64, channels = 1, batch = 32;
  bool augment = false;
  app.add_option("folder", root, "segmentation folder (images/ + masks/; its train/ when it has one)")
      ->required()
      ->check(CLI::ExistingPath);
  app.add_option("--size", size, "output height = width")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--channels", channels, "1 or 3")->check(CLI::IsMember({1, 3}))->capture_default_str();
  app.add_option("--batch", batch, "pairs per batch")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_flag("--augment", augment, "RandomResizedCrop + flip (default: resize)");
  return kiln_bench::run(app, argc, argv, [&]() -> int {
  using clock = std::chrono::steady_clock;
  auto secs = [](clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); };
  try {
    SegmentationDataset ds = has_segmentation_splits(root) ? segmentation_folder_splits(root).train
                                                           : open_segmentation_dataset(root);
    std::printf("bench_segmentation_loader: %zu pairs from %s -> %d x %d x %d, batch %d, %s\n", ds.size(),
                root.c_str(), channels, size, size, batch, augment ? "RandomResizedCrop + flip" : "resize");
    for (int workers : {1, 2}) {
      ImageOptions o;
      o.image_size = std::to_string(size);
      o.crop = "none";
      o.augment = augment ? "rrc" : "none";
      o.channels = channels;
      o.workers = workers;
      const float mean[3] = {0, 0, 0}, stdv[3] = {1, 1, 1};
      auto seg = make_segmentation_source(ds, o, ImageSizeSchedule::parse(o.image_size), mean, stdv, 0, 1,
                                          Device::cpu());
      double best_seg = 1e30;
      size_t n_seg = 0;
      for (int e = 0; e < 3; ++e) {
        const auto t0 = clock::now();
        seg->start_epoch(e, batch, true);
        SourceBatch b;
        n_seg = 0;
        while (seg->next(&b)) n_seg += (size_t)b.x.size(0);
        best_seg = std::min(best_seg, secs(t0));
      }
      // The peer: the same images, the same geometry, no masks.
      ImageDataset images;
      images.root = ds.root;
      images.classes = {"image"};
      for (const SegmentationSample& s : ds.samples) images.samples.push_back({s.image, 0});
      ImageLoaderOptions lo;
      lo.batch_size = (size_t)batch;
      lo.workers = workers;
      lo.sampler.kind = SamplerKind::random;
      lo.transform.channels = channels;
      lo.transform.out_w = lo.transform.out_h = size;
      lo.transform.kind = augment ? SampleTransform::Kind::random_resized_crop : SampleTransform::Kind::resize_exact;
      lo.transform.random_hflip = augment;
      ImageLoader loader(images, lo);
      double best_img = 1e30;
      size_t n_img = 0;
      for (int e = 0; e < 3; ++e) {
        const auto t0 = clock::now();
        loader.start_epoch((uint64_t)e);
        ImageBatch b;
        n_img = 0;
        while (loader.next(b)) n_img += (size_t)b.n;
        best_img = std::min(best_img, secs(t0));
      }
      std::printf("  workers %d: segmentation %zu pairs in %.2f s = %.0f pairs/s; images only (ImageLoader) %.0f "
                  "images/s; ratio %.2f\n",
                  workers, n_seg, best_seg, (double)n_seg / best_seg, (double)n_img / best_img,
                  ((double)n_img / best_img) / ((double)n_seg / best_seg));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_segmentation_loader: error: %s\n", e.what());
    return 1;
  }
  return 0;
  });
}
