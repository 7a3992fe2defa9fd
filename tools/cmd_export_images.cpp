// `kiln export-images --data DIR --out DIR`: an IDX / npy data set written once as a JPEG image
// folder (data/export_images.h); `kiln export-images --segmentation OUT`: a segmentation data set
// made from Fashion-MNIST (data/export_segmentation.h).
#include <cstdio>

#include "engine/core/usage_error.h"
#include "tools/cli_commands.h"

namespace kiln_cli {

CLI::App* add_export_images_command(CLI::App& app, ExportImagesCommand& c) {
  kiln::ExportImagesOptions& o = c.images;
  kiln::ExportSegmentationOptions& s = c.segmentation;
  CLI::App* e = app.add_subcommand(
      "export-images", "write an IDX or npy data set as a JPEG image folder (OUT/train/<class>, OUT/test/<class>), or "
                       "with --segmentation OUT a segmentation data set made from Fashion-MNIST");
  e->add_option("--data", o.data,
                "IDX folder (its t10k files become test/) or x.npy + y.npy folder; with --segmentation: the "
                "Fashion-MNIST IDX folder (default " + s.data + ")");
  e->add_option("--val", o.val, "data written as test/ (default: the IDX t10k split)");
  e->add_option("--out", o.out, "output folder (required without --segmentation)");
  e->add_option("--quality", o.quality, "JPEG quality 1..100")->capture_default_str();
  e->add_flag("--force", o.force,
              "export again even when OUT already holds this export, and over files kiln did not write");
  e->add_option("--segmentation", s.out,
                "write a segmentation data set here instead: OUT/{train,val}/{images,masks}/NNNNNN.png (gray PNGs), "
                "2-4 Fashion-MNIST items pasted on each canvas, mask = item class + 1 where it has ink, 0 background; "
                "OUT/classes.txt");
  e->add_option("--count", s.count, "--segmentation: training samples (val gets count / 5)")->capture_default_str();
  e->add_option("--canvas", s.canvas, "--segmentation: canvas side in pixels (>= 28)")->capture_default_str();
  e->add_option("--classes", s.classes,
                "--segmentation: items (background + Fashion-MNIST's 10 classes) or shapes (background + 4 outline "
                "groups: top, trouser, footwear, bag; each group equally common)")
      ->check(CLI::IsMember({"items", "shapes"}))
      ->capture_default_str();
  e->add_option("--seed", s.seed, "--segmentation: placement and choice of the items")->capture_default_str();
  return e;
}

int run_export_images_command(ExportImagesCommand& c) {
  const kiln::ExportImagesOptions& o = c.images;
  if (!c.segmentation.out.empty()) {
    kiln::ExportSegmentationOptions s = c.segmentation;
    if (!o.data.empty()) s.data = o.data;
    if (!o.out.empty() || !o.val.empty())
      throw kiln::UsageError("export-images --segmentation OUT: --out and --val belong to the image-folder export");
    s.force = o.force;
    s.progress = [](const std::string& split, int64_t done, int64_t total) {
      std::fprintf(stderr, "export-images: %s %lld/%lld\n", split.c_str(), (long long)done, (long long)total);
    };
    kiln::ExportSegmentationResult r = kiln::export_segmentation(s);
    if (r.skipped) {
      std::printf("export-images: %s already holds this segmentation export (--force to write it again)\n",
                  s.out.c_str());
      return 0;
    }
    if (!r.replaced.empty())
      std::printf("export-images: %s held a segmentation export of other settings (%s); exported again\n",
                  s.out.c_str(), r.replaced.c_str());
    std::printf("export-images: %lld train + %lld val segmentation samples (%dx%d gray PNG, %s) -> %s (%.1f s)\n",
                (long long)r.train, (long long)r.val, s.canvas, s.canvas,
                s.classes == "shapes" ? "5 classes: background + top, trouser, footwear, bag"
                                      : "11 classes: background + Fashion-MNIST's 10",
                s.out.c_str(), r.seconds);
    return 0;
  }
  if (o.data.empty() || o.out.empty())
    throw kiln::UsageError("export-images: --data and --out are required (or --segmentation OUT)");
  kiln::ExportImagesResult r = kiln::export_images(o);
  if (r.skipped) {
    std::printf("export-images: %s already holds a complete export (--force to write it again)\n", o.out.c_str());
    return 0;
  }
  if (!r.replaced.empty())
    std::printf("export-images: %s held an export of other settings (%s); exported again\n", o.out.c_str(),
                r.replaced.c_str());
  std::printf("export-images: %lld train + %lld test images, %lld classes, JPEG quality %d -> %s (%.1f s)\n",
              (long long)r.train, (long long)r.test, (long long)r.classes, o.quality, o.out.c_str(), r.seconds);
  return 0;
}

}  // namespace kiln_cli
