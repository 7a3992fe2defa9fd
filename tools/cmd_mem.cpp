// CLI11 options of `kiln mem` and of `kiln train --checkpoint / --memory-report` (see cmd_mem.h).
#include "tools/cmd_mem.h"

#include "models/registry.h"
#include "tools/cli_amp_option.h"

namespace kiln {

CLI::App* add_mem_command(CLI::App& app, MemCommandOptions& o) {
  CLI::App* m = app.add_subcommand(
      "mem", "predict a training step's memory on the meta device (accounts, per-layer activations, peaks)");
  MemConfig& c = o.config;
  std::string names;
  for (const std::string& n : models::model_names()) names += (names.empty() ? "" : ", ") + n;
  m->add_option("--model", c.train.model, "model name: " + names + ", or a model file NAME.json")->required();
  m->add_option("--task", c.train.task,
                "classify: (B) labels and (B, K) logits; segment: (B, H, W) masks, (B, K, H, W) outputs and the "
                "per-pixel loss, as kiln train --task segment")
      ->check(CLI::IsMember({"classify", "segment"}))
      ->capture_default_str();
  m->add_option("--loss", c.train.loss, "--task segment: ce, dice or ce+dice, as kiln train --loss")
      ->check(CLI::IsMember({"ce", "dice", "ce+dice"}))
      ->capture_default_str();
  m->add_option("--batch", c.train.batch, "images per optimizer step")->check(kiln_cli::positive)->capture_default_str();
  m->add_option("--image-size", c.image_size, "image height = width")->check(kiln_cli::positive)->capture_default_str();
  m->add_option("--num-classes", c.num_classes, "classes")->check(kiln_cli::positive)->capture_default_str();
  m->add_option("--in-channels", c.in_channels, "input channels")->check(kiln_cli::positive)->capture_default_str();
  m->add_option("--device", c.train.device, "the device to predict for: cpu or cuda:N")->capture_default_str();
  m->add_option("--threads", c.train.threads,
                "CPU threads of the run (as kiln train --threads; default: all cores): the CPU convolution's "
                "scratch grows with them")
      ->check(kiln_cli::positive);
  m->add_option("--optimizer", c.train.optimizer, "sgd or adamw")->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  m->add_option("--momentum", c.train.momentum, "SGD momentum (> 0 keeps a momentum buffer)")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  m->add_option("--recompute,--checkpoint", o.recompute,
                "recompute-on-backward segments N (0: off) or auto (fit the budget); --checkpoint is the old name")
      ->capture_default_str();
  kiln_cli::add_amp_option(m, c.train,
                           "mixed precision as kiln train --amp: --amp or --amp f16 (f16 autocast + dynamic loss "
                           "scaling) or --amp bf16 (bf16 autocast, no loss scaler)");
  m->add_option("--accum", c.train.accum, "micro-batches per step")->check(kiln_cli::positive)->capture_default_str();
  m->add_option("--nproc", c.ranks, "data-parallel ranks of the run (kiln train --nproc / mpirun -n): predict one "
                "rank, --batch per rank, with its gradient buckets")
      ->check(kiln_cli::positive)->capture_default_str();
  m->add_option("--bucket-mb", c.train.bucket_mb, "with --nproc: gradient bucket size in MiB, as kiln train's")
      ->check(CLI::PositiveNumber)->capture_default_str();
  m->add_option("--device-memory", o.device_memory, "memory budget, e.g. 8G (default: the device's capacity)");
  m->add_flag("--json", o.json, "print one JSON object");
  m->add_flag("--max-batch", o.max_batch, "also find the largest batch that fits the budget with --margin");
  m->add_option("--margin", o.margin, "headroom kept free by --max-batch")->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  m->add_option("--report", o.report, "write a self-contained HTML memory report here");
  return m;
}

void add_train_memory_options(CLI::App* t, RunConfig& c) {
  t->add_option("--recompute,--checkpoint", c.recompute,
                "recompute-on-backward segments N (0: off) or auto (the fewest recomputed stages that fit "
                "--device-memory or the device); --checkpoint is the old name (training state: --checkpoint-every)")
      ->capture_default_str();
  t->add_flag("--force", c.force,
              "train even when the predicted peak memory exceeds --device-memory or the device (default: stop "
              "before the first step, listing remedies with their predicted peaks)");
  t->add_option("--memory-report", c.memory_report,
                "write an HTML memory report (timeline, per-layer activations, segments, predicted vs measured)");
}

}  // namespace kiln
