// The image-pipeline and allocator options of `kiln train` / `kiln predict` (see cli_commands.h).
#include "tools/cli_commands.h"

#include <map>

namespace kiln_cli {

namespace {
// The --augment option of each registered ImageOptions: given without a value, it means rrc.
std::map<const kiln::ImageOptions*, CLI::Option*>& augment_options() {
  static std::map<const kiln::ImageOptions*, CLI::Option*> m;
  return m;
}
}  // namespace

void add_image_options(CLI::App* t, kiln::ImageOptions& o, bool training) {
  const char* g = "Image folders and CSV lists";
  t->add_option("--image-size", o.image_size,
                training ? "input size S (S x S); a schedule 128:10,224 trains 128 px for 10 epochs, then 224 "
                           "(progressive resizing). Default: the first image's shorter side"
                         : "input size S (default: the size the weights were trained at)")
      ->group(g);
  t->add_option("--resize", o.resize,
                training ? "shorter side before the centre crop (default: the image size)"
                         : "shorter side before the centre crop (default: as the weights were trained)")
      ->check(kiln_cli::non_negative)
      ->group(g);
  CLI::Option* crop =
      t->add_option("--crop", o.crop,
                    training ? "center: resize the shorter side, then centre crop; none: resize to S x S"
                             : "center or none (default: as the weights were trained)")
          ->group(g);
  if (training) crop->capture_default_str();
  if (training) {
    augment_options()[&o] = t->add_option("--augment", o.augment,
                  "training augmentation: none (default), flip, rrc (RandomResizedCrop scale 0.08-1 + flip; what "
                  "--augment alone means) or rrc:MIN_SCALE")
        ->expected(0, 1)  // no default_str: CLI11 would print it as the default; finish_image_options fills rrc in
        ->group(g);
    t->add_flag("--balance", o.balance, "sample classes equally (weighted sampler, inverse class frequencies)")
        ->group(g);
  }
  CLI::Option* norm =
      t->add_option("--normalize", o.normalize,
                    training ? "none, imagenet, auto (the training split's per-channel mean/std over every pixel of every "
                               "readable image at full size, the numbers kiln data prints) or m1,m2,m3:s1,s2,s3"
                             : "default: the training run's values, stored with the weights (auto means those too; "
                               "predict never measures its data)")
          ->group(g);
  if (training) norm->capture_default_str();
  t->add_option("--workers", o.workers, "loader threads (default: half the cores)")
      ->check(kiln_cli::non_negative)
      ->group(g);
  t->add_flag("--pin-memory", o.pin_memory, "GPU: batches in pinned host memory, copied asynchronously")->group(g);
  t->add_option("--prefetch", o.prefetch, "batches decoded ahead of the training step (the loader's queue depth)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->group(g);
  CLI::Option* channels =
      t->add_option("--channels", o.channels,
                    training ? "1 (grayscale) or 3 (RGB)" : "1 or 3 (default: as the weights were trained)")
          ->check(CLI::IsMember({1, 3}))
          ->group(g);
  if (training) channels->capture_default_str();
}

void finish_image_options(kiln::ImageOptions& o) {
  auto it = augment_options().find(&o);
  if (it != augment_options().end() && it->second->count() > 0) {
    bool has_value = false;
    for (const std::string& r : it->second->results()) has_value = has_value || !r.empty();
    if (!has_value) o.augment = "rrc";  // --augment without a value
  }
  if (o.augment.empty()) o.augment = "rrc";
  o.validate();
}

void add_alloc_options(CLI::App* t, kiln::AllocOptions& o) {
  const char* g = "Memory";
  t->add_option("--device-memory", o.device_memory,
                "pretend the training device has this much memory (e.g. 6G, 512M): a small GPU simulated on the CPU")
      ->group(g);
  t->add_option("--memory-snapshot", o.memory_snapshot, "write the allocator snapshot (JSON) after the first step")
      ->group(g);
  t->add_option("--trace", o.trace, "write the first step's allocator events as Chrome trace JSON (Perfetto)")
      ->group(g);
  t->add_option("--alloc-trace", o.alloc_trace, "write the first step's alloc/free sequence for bench_alloc")
      ->group(g);
}

}  // namespace kiln_cli
