// `kiln export-images --data DIR --out DIR`: an IDX / npy data set written once as a JPEG image
// folder (data/export_images.h).
#include <cstdio>

#include "tools/cli_commands.h"

namespace kiln_cli {

CLI::App* add_export_images_command(CLI::App& app, kiln::ExportImagesOptions& o) {
  CLI::App* e = app.add_subcommand(
      "export-images", "write an IDX or npy data set as a JPEG image folder (OUT/train/<class>, OUT/test/<class>)");
  e->add_option("--data", o.data, "IDX folder (its t10k files become test/) or x.npy + y.npy folder")->required();
  e->add_option("--val", o.val, "data written as test/ (default: the IDX t10k split)");
  e->add_option("--out", o.out, "output folder")->required();
  e->add_option("--quality", o.quality, "JPEG quality 1..100")->capture_default_str();
  e->add_flag("--force", o.force,
              "export again even when OUT already holds this export, and over files kiln did not write");
  return e;
}

int run_export_images_command(const kiln::ExportImagesOptions& o) {
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
