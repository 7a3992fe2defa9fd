// bench_loader: how fast kiln's ImageLoader turns an image folder into training batches (decode +
// resize/crop + normalize into (B, C, H, W) f32), at 1 and 2 worker threads, with nothing consuming
// the batches but the loop. It answers "does decoding small JPEGs every epoch dominate training?":
// compare its images/s with `kiln train`'s.
//
// Usage: bench_loader FOLDER [--size S] [--channels 1|3] [--batch B] [--augment] [--limit N]
// FOLDER: an image folder (with train/ it uses train/), e.g. `kiln export-images` of Fashion-MNIST.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "data/dataset.h"
#include "data/image_loader.h"

#include "bench/bench_cli.h"

using namespace kiln;

int main(int argc, char** argv) {
  CLI::App app{"bench_loader: images/s of kiln's ImageLoader turning an image folder into training batches, at 1 "
               "and 2 worker threads"};
  app.name("bench_loader");
  std::string root;
  int size = 28, channels = 1, batch = 64;
  size_t limit = 0;
  bool augment = false;
  app.add_option("folder", root, "image folder (its train/ when it has one)")->required()->check(CLI::ExistingDirectory);
  app.add_option("--size", size, "output height = width")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--channels", channels, "1 or 3")->check(CLI::IsMember({1, 3}))->capture_default_str();
  app.add_option("--batch", batch, "images per batch")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--limit", limit, "use N images spread over the folder (0: all)");
  app.add_flag("--augment", augment, "RandomResizedCrop + flip (default: resize + centre crop)");
  return kiln_bench::run(app, argc, argv, [&]() -> int {
  try {
    ImageDataset ds = has_split_folders(root) ? image_folder_splits(root).train : open_image_dataset(root);
    if (limit > 0 && limit < ds.size()) {
      std::vector<ImageSample> kept;
      for (size_t i = 0; i < limit; ++i) kept.push_back(ds.samples[i * ds.size() / limit]);
      ds.samples = kept;
    }
    std::printf("bench_loader: %zu images from %s -> %d x %d x %d f32, batch %d, %s\n", ds.size(), root.c_str(),
                channels, size, size, batch, augment ? "RandomResizedCrop + flip" : "resize + centre crop");
    for (int workers : {1, 2}) {
      ImageLoaderOptions o;
      o.batch_size = (size_t)batch;
      o.workers = workers;
      o.sampler.kind = SamplerKind::random;
      o.transform.channels = channels;
      o.transform.out_w = o.transform.out_h = size;
      o.transform.resize = size;
      if (augment) {
        o.transform.kind = SampleTransform::Kind::random_resized_crop;
        o.transform.random_hflip = true;
      }
      ImageLoader loader(ds, o);
      loader.start_epoch(0);
      const auto t0 = std::chrono::steady_clock::now();
      ImageBatch b;
      size_t n = 0;
      while (loader.next(b)) n += (size_t)b.n;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("  workers %d: %zu images in %.2f s = %.0f images/s (%zu bad)\n", workers, n, s, (double)n / s,
                  loader.bad_count());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_loader: error: %s\n", e.what());
    return 1;
  }
  return 0;
  });
}
