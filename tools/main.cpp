// The `kiln` command: subcommands train, predict, mem, model, data, export, export-images, runs, report and devices over
// CLI11. Parses and validates options, then hands over to the rest of tools/ (the kiln_tools library, so
// tests can call it). Every
// failure — a CLI11 parse error, a kiln::Error, any std::exception — becomes one line
// "kiln: error: ..." on stderr and a non-zero exit status, the same scheme for every subcommand:
//   0  done (also --help)
//   1  a run or data error (a file that cannot be read or written, bad data, out of memory, a
//      training failure, a --resume state that contradicts the flags)
//   2  a usage error: an unknown command or flag, a missing or malformed value, flags that
//      contradict each other (CLI11's parse errors, and kiln::UsageError found after parsing)
// A `kiln train` refused before its first step still appends its ledger line (tools/train_loop.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "engine/core/error.h"
#include "engine/dist/process_group.h"
#include "engine/core/usage_error.h"
#include "models/registry.h"
#include "kernels/cpu/bf16_path.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/threads.h"
#include "tools/cli_amp_option.h"
#include "tools/cmd_mem.h"
#include "tools/cmd_model.h"
#include "tools/cli_commands.h"
#include "tools/cmd_export.h"
#include "tools/launch_ranks.h"
#include "engine/core/devices.h"
#include "tools/predict.h"
#include "engine/run/run_config.h"
#include "tools/train_command.h"

#include <unistd.h>

namespace {

constexpr int kExitRunError = 1;
constexpr int kExitUsage = 2;

// Runs the flag checks that follow parsing; a kiln::Error from them is a usage error.
template <typename F>
void usage_checks(F&& checks) {
  try {
    checks();
  } catch (const kiln::UsageError&) {
    throw;
  } catch (const kiln::Error& e) {
    throw kiln::UsageError(e.what());
  }
}

// The one error line and the exit status. A rank of a data-parallel run names itself and ends every
// rank (MPI_Abort): the others would otherwise wait in their next collective for ever.
int fail(const char* what, int code) {
  std::cout.flush();
  if (kiln::dist::world_is_distributed()) {
    std::fprintf(stderr, "kiln: error: rank %d of %d: %s\n", kiln::dist::world().rank(), kiln::dist::world().size(),
                 what);
    std::fflush(stderr);
    kiln::dist::world().abort(code);
  }
  std::fprintf(stderr, "kiln: error: %s\n", what);
  return code;
}

std::string model_list() {
  std::string list;
  for (const std::string& n : kiln::models::model_names()) list += (list.empty() ? "" : ", ") + n;
  return list;
}

void add_train_options(CLI::App* t, kiln::RunConfig& c, std::string& class_weights, std::string& checkpoint_every) {
  t->add_option("--model", c.model, "model name: " + model_list() + ", or a model file NAME.json")->required();
  t->add_option("--task", c.task,
                "classify (labels, (N, K) logits) or segment (masks (N, H, W) with 255 = ignore, (N, K, H, W) "
                "outputs, per-pixel cross-entropy; pixel accuracy, mean IoU and Dice per class each epoch)")
      ->check(CLI::IsMember({"classify", "segment"}))
      ->capture_default_str();
  t->add_option("--loss", c.loss,
                "--task segment: ce (per-pixel cross-entropy, --class-weights apply), dice (soft Dice, smoothing 1) "
                "or ce+dice (their sum)")
      ->check(CLI::IsMember({"ce", "dice", "ce+dice"}))
      ->capture_default_str();
  t->add_flag("--ignore-background", c.ignore_background,
              "--task segment: leave class 0 (background) out of mean IoU and mean Dice");
  t->add_option("--data", c.data,
                "training data: a folder of MNIST-format IDX files (gzip ok; its t10k files become --val), x.npy "
                "(N,C,H,W f32 or N,H,W,C u8) + y.npy (N i64), an image folder (class subfolders; train/ + val/ "
                "or test/ splits used automatically) or a CSV list (path,label)")
      ->required();
  t->add_option("--val", c.val, "validation data folder (same formats)");
  t->add_option("--num-classes", c.num_classes, "number of classes (default: max label + 1)")
      ->check(kiln_cli::positive);
  t->add_option("--epochs", c.epochs, "epochs to train")->check(kiln_cli::positive)->capture_default_str();
  t->add_option("--batch", c.batch, "images per optimizer step (split into --accum micro-batches)")
      ->check(kiln_cli::positive)
      ->capture_default_str();
  t->add_option("--batch-memory", c.batch_memory,
                "image folders/CSV of mixed sizes: keep each image near its own size (buckets: shorter side rounded "
                "down to a multiple of 32 px) and size each bucket's batch so that a step's predicted peak allocated "
                "bytes fit BYTES (e.g. 6G); lr not scaled with the batch")
      ->excludes("--batch");
  t->add_flag("--drop-last", c.drop_last,
              "drop each epoch's last batch when it is short (default: keep it, no sample left out)");
  t->add_option("--accum", c.accum, "micro-batches per optimizer step (loss divided by N)")
      ->check(kiln_cli::positive)
      ->capture_default_str();
  t->add_option("--optimizer", c.optimizer, "sgd or adamw")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  t->add_option("--lr", c.lr, "learning rate")->check(kiln_cli::positive)->capture_default_str();
  t->add_option("--momentum", c.momentum, "SGD momentum")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  t->add_option("--weight-decay", c.weight_decay, "weight decay (default: sgd 0, adamw 0.01)")
      ->check(kiln_cli::non_negative);
  t->add_option("--schedule", c.schedule, "LR schedule: none, cosine, step:EVERY_EPOCHS:GAMMA")
      ->capture_default_str();
  t->add_option("--warmup", c.warmup, "linear LR warm-up over N optimizer steps")
      ->check(kiln_cli::non_negative)
      ->capture_default_str();
  t->add_option("--clip", c.clip, "clip the global gradient norm to X (0: off)")->check(kiln_cli::non_negative);
  t->add_option("--class-weights", class_weights, "loss weight per class: w1,w2,...");
  t->add_option("--seed", c.seed, "random seed (initialization, shuffling, dropout)")->capture_default_str();
  t->add_option("--threads", c.threads, "CPU threads (default: all cores)")->check(kiln_cli::positive);
  t->add_option("--device", c.device, "auto, cpu or cuda:N")->capture_default_str();
  t->add_option("--init", c.init, "load weights (safetensors, torchvision names) before training")
      ->check(CLI::ExistingFile);
  t->add_option("--save", c.save, "write the final weights (safetensors) here");
  t->add_option("--resume", c.resume,
                "continue from a training-state file (OUT/checkpoint.safetensors), mid-epoch too; flags that "
                "contradict it are refused")
      ->check(CLI::ExistingFile);
  t->add_flag("--resume-override", c.resume_override,
              "with --resume: flags that differ from the saved state win (a different optimizer starts fresh)");
  t->add_option("--checkpoint-every", checkpoint_every,
                "training-state file every N epochs (N or Nep; 0: only at the end), every N optimizer steps "
                "(Nsteps), or both (2ep,500steps)")
      ->capture_default_str();
  t->add_option("--out", c.out, "output folder: checkpoint.safetensors and runs.jsonl")->capture_default_str();
  t->add_option("--limit", c.limit, "use only the first N training samples (quick runs)")
      ->check(kiln_cli::non_negative);
  kiln_cli::add_amp_option(t, c,
                           "mixed precision: autocast (conv, linear, matmul in 16 bits, f32 accumulation; batch norm "
                           "statistics, softmax, losses, reductions in f32) with f32 master weights. --amp or --amp "
                           "f16: f16 with dynamic loss scaling; --amp bf16: bf16, no loss scaling (f32's range)");
  t->add_option("--amp-init-scale", c.amp_init_scale, "initial loss scale of --amp (f16)")
      ->check(kiln_cli::positive)
      ->capture_default_str();
  t->add_option("--amp-growth-interval", c.amp_growth_interval,
                "clean steps before --amp (f16) doubles the loss scale")
      ->check(kiln_cli::positive)
      ->capture_default_str();
  t->add_option("--max-skipped-steps", c.max_skipped_steps,
                "--amp (f16): end the run after N consecutive steps the loss scaler skipped (0: never)")
      ->check(kiln_cli::non_negative)
      ->capture_default_str();
  t->add_option("--bucket-mb", c.bucket_mb,
                "data-parallel runs (mpirun -n N kiln train): gradient bucket size in MiB, all-reduced during "
                "backward (the first bucket at most 1 MiB)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  t->add_option("--dist-timeout", c.dist_timeout,
                "data-parallel runs: seconds a rank waits for the others in a collective (an all-reduce) before it "
                "names the stall (a rank died or hangs) and ends the job; 0: wait for ever")
      ->check(kiln_cli::non_negative)
      ->capture_default_str();
  t->add_flag("--sync-bn", c.sync_bn,
              "data-parallel runs: BatchNorm statistics of the global batch (SyncBatchNorm: sums over the ranks "
              "in forward and backward), so N ranks at --batch B train like 1 process at N x B (with --accum, "
              "each micro-batch too); one process: plain BatchNorm");
  t->add_flag("--detect-anomaly", c.detect_anomaly,
              "check every op's output and gradient for inf/NaN as it runs (slow; without it only a step whose "
              "loss or gradient is non-finite is re-run with the check, to name the op)");
  t->add_option("--kernels", c.kernels,
                "GEMM/convolution kernels on CUDA: vendor (cuBLAS/cuDNN) or kiln (kiln's Tensor Core kernels)")
      ->capture_default_str();
  CLI::Option* cl = t->add_flag("--channels-last", c.channels_last,
                                 "feed the model channels-last (NHWC) batches: Tensor Core convolutions on CUDA want "
                                 "them. Default (neither this nor --no-channels-last): on for --amp bf16 on the CPU "
                                 "(kiln's bf16 CPU convolutions run fastest on NHWC), off otherwise");
  t->add_flag("--no-channels-last", c.no_channels_last,
              "feed the model NCHW batches, also where the default would be channels-last (--amp bf16 on the CPU)")
      ->excludes(cl);
}

}  // namespace

int main(int argc, char** argv) {
  kiln::cpu::ensure_omp_wait_policy(argv);
  CLI::App app{"kiln: a from-scratch deep-learning training engine"};
  app.name("kiln");
  app.require_subcommand(1);

  kiln::RunConfig tc;
  std::string class_weights, checkpoint_every = "1";
  CLI::App* train = app.add_subcommand("train", "train a model on a data set");
  add_train_options(train, tc, class_weights, checkpoint_every);
  bool dry_run = false, plan_json = false;
  train->add_flag("--dry-run", dry_run,
                  "plan the run and stop: it is prepared as training would prepare it (data, model, a --resume "
                  "state) and replayed on the meta device; prints each phase's predicted peak allocated and "
                  "reserved bytes, the whole run's, and whether it fits the budget (exit status 1 when not, with "
                  "the remedies); trains nothing and writes no file");
  train->add_flag("--json", plan_json, "with --dry-run: print the plan as one JSON object (bytes)");
  int nproc = 1;
  train->add_option("--nproc", nproc,
                    "train data-parallel with N processes on this machine: starts mpirun -n N kiln train <the other "
                    "flags> (--batch is per process; needs a kiln built with MPI; as root it sets OMPI_ALLOW_RUN_AS_ROOT=1 and "
                    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 where unset, and says so)")
      ->check(kiln_cli::positive);
  kiln::add_train_memory_options(train, tc);

  kiln::MemCommandOptions mo;
  CLI::App* mem = kiln::add_mem_command(app, mo);
  kiln_cli::add_image_options(train, tc.image, true);
  kiln_cli::add_alloc_options(train, tc.alloc);
  kiln_cli::add_train_report_options(train, tc);

  kiln::PredictConfig pc;
  CLI::App* predict = app.add_subcommand("predict", "write per-sample predicted class and logits as CSV");
  predict->add_option("--model", pc.model,
                      "model name: " + model_list() + ", or a model file NAME.json (default: the one the weights were "
                      "trained as; a model file's text travels in the weights)");
  predict->add_option("--weights", pc.weights,
                      "weights (safetensors from kiln train --save, or a training-state file); they carry the model, "
                      "classes and preprocessing")
      ->required()
      ->check(CLI::ExistingFile);
  predict->add_option("--data", pc.inputs,
                      "IDX folder (its t10k split), x.npy + y.npy, an image folder (its val/ or test/ split when it "
                      "has one; classes matched to the model's by name) or a CSV list (path,label); images without "
                      "labels: a flat folder of images, one or more image files or glob patterns ('imgs/*.jpg'), or "
                      "a CSV of paths only (they write path,class,score and the top-5 classes, and no accuracy)")
      ->required()
      ->expected(1, -1);
  predict->add_option("--out", pc.out, "CSV file to write (--task segment: a folder for mask and overlay PNGs)")
      ->required();
  predict->add_option("--task", pc.task,
                      "classify or segment (default: the weights' task; segment writes <stem>_mask.png, "
                      "<stem>_overlay.png and summary.json into --out, <stem> the image's path relative to the folder "
                      "holding every image, without its extension; masks in the data (an npy mask folder, a "
                      "segmentation folder's masks/ or an image,mask CSV, every image with its mask) score it)")
      ->check(CLI::IsMember({"classify", "segment"}));
  predict->add_flag("--ignore-background", pc.ignore_background,
                    "--task segment with masks in the data: class 0 left out of the summary's mean IoU and Dice");
  predict->add_option("--num-classes", pc.num_classes, "number of classes (default: from the weights file)")
      ->check(kiln_cli::positive);
  predict->add_option("--batch", pc.batch, "images per forward pass")->check(kiln_cli::positive)
      ->capture_default_str();
  predict->add_option("--threads", pc.threads, "CPU threads")->check(kiln_cli::positive);
  predict->add_option("--device", pc.device, "auto, cpu or cuda:N")->capture_default_str();

  kiln_cli::add_image_options(predict, pc.image, false);
  predict->add_flag("--dry-run", pc.dry_run,
                    "print the prediction's memory plan (its model and batches replayed on the meta device: peak "
                    "allocated and reserved, against the budget) and exit without predicting or writing anything "
                    "(status 1 when it does not fit)");
  predict->add_option("--device-memory", pc.device_memory,
                      "pretend the device has this much memory (e.g. 6G, 512M): the plan's budget, and a small GPU "
                      "simulated on the CPU");
  predict->add_flag("--force", pc.force,
                    "use the given --image-size/--resize/--crop/--normalize/--channels/--model/--num-classes even "
                    "where they contradict what the weights were trained with; --task segment: overwrite mask, overlay "
                    "and summary files that --out already holds (refused without it)");
  kiln::DataReportOptions dc;
  CLI::App* data_cmd = kiln_cli::add_data_command(app, dc);
  kiln_cli::ExportImagesCommand ec;
  CLI::App* export_cmd = kiln_cli::add_export_images_command(app, ec);
  kiln_cli::ExportOnnxOptions xo;
  CLI::App* export_onnx_cmd = kiln_cli::add_export_command(app, xo);

  kiln_cli::RunsOptions ro;
  CLI::App* runs_cmd = kiln_cli::add_runs_command(app, ro);
  kiln_cli::ReportOptions rpo;
  CLI::App* report_cmd = kiln_cli::add_report_command(app, rpo);

  kiln::ModelShowOptions mso;
  CLI::App* model_cmd = kiln::add_model_command(app, mso);

  app.add_subcommand("devices", "list compute devices, or say why no GPU is usable");

  const std::string first = argc > 1 ? argv[1] : "";
  if (!first.empty() && first[0] != '-' && first != "train" && first != "predict" && first != "devices" &&
      first != "mem" && first != "data" && first != "export" && first != "export-images" && first != "runs" &&
      first != "report" && first != "model") {
    std::fprintf(stderr,
                 "kiln: error: unknown command '%s' (expected train, predict, mem, model, data, export, export-images, "
                 "runs, report or devices; "
                 "see kiln --help)\n",
                 argv[1]);
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "kiln: error: %s (see kiln --help)\n", e.what());
    return kExitUsage;  // CLI11's own codes (105, 106, 114, ...) differ per error; kiln has one
  }

  try {
    kiln::cpu::cpu_isa();  // a bad KILN_CPU_ISA is an error before any work
    if (train->parsed()) {
      if (nproc > 1) kiln_cli::launch_ranks(nproc, argc, argv);  // exec: mpirun -n N kiln train ...
      try {
        usage_checks([&] {
          if (!class_weights.empty()) tc.class_weights = kiln::parse_double_list(class_weights, "--class-weights");
          kiln::parse_checkpoint_every(checkpoint_every, &tc);
          kiln::LrSchedule::parse(tc.schedule, tc.warmup);  // validate before loading anything
          kiln_cli::finish_image_options(tc.image);
          tc.alloc.validate();
        });
      } catch (const kiln::UsageError& e) {
        kiln::record_refused_run(tc, e.what());
        throw;
      }
      if (tc.threads > 0) kiln::cpu::set_num_threads(tc.threads);
      if (plan_json && !dry_run) return fail("--json applies to --dry-run (the plan) only", kExitUsage);
      if (dry_run) return kiln_cli::run_plan_command(tc, plan_json, std::cout, std::cout);
      kiln_cli::run_train_command(tc, std::cout, std::cerr, ::isatty(2), kiln_cli::train_report_hook(tc));
      if (!tc.report.empty() && kiln::dist::world().rank() == 0) std::cout << "report: " << tc.report << "\n";
    } else if (mem->parsed()) {
      kiln::run_mem_command(mo, std::cout);
    } else if (predict->parsed()) {
      if (pc.threads > 0) kiln::cpu::set_num_threads(pc.threads);
      usage_checks([&] { kiln_cli::finish_image_options(pc.image); });
      pc.data = pc.inputs.front();
      for (const char* name : {"image-size", "resize", "crop", "normalize", "channels"})
        if (predict->get_option(std::string("--") + name)->count() > 0) pc.given.insert(name);
      const kiln::PredictResult pr = kiln::run_predict(pc, std::cout);
      if (pc.dry_run && !pr.plan_fits) return 1;
    } else if (model_cmd->parsed()) {
      kiln::run_model_show(mso, std::cout);
    } else if (data_cmd->parsed()) {
      return kiln_cli::run_data_command(dc);
    } else if (export_onnx_cmd->parsed()) {
      kiln_cli::run_export_command(xo, std::cout);
    } else if (export_cmd->parsed()) {
      return kiln_cli::run_export_images_command(ec);
    } else if (runs_cmd->parsed()) {
      return kiln_cli::run_runs_command(ro);
    } else if (report_cmd->parsed()) {
      return kiln_cli::run_report_command(rpo);
    } else {
      std::cout << kiln::format_device_report(kiln::query_devices());
      // The CPU's kernels: its model, the ISA in use and the bf16 paths (kernels/cpu/bf16_path.h).
      std::cout << "cpu model: " << kiln::cpu::cpu_model_name() << "\n"
                << "cpu isa: " << kiln::cpu::cpu_isa_name(kiln::cpu::cpu_isa()) << " (supported: "
                << kiln::cpu::cpu_isa_name(kiln::cpu::cpu_isa_supported()) << "; KILN_CPU_ISA picks a lower one)\n"
                << "cpu bf16 conv: " << kiln::cpu::bf16_path_name(kiln::cpu::bf16_path_wanted())
                << " (groups 1 with C*R*S >= 16; at 1 thread the weight gradient as im2col + matmul on small strided "
                   "output planes; above 1 thread the weight gradient split between the threads by output "
                   "channel where K >= 32 and N*OH*OW < 256 or x is no larger than dw in f32, else by image where N*OH*OW >= "
                   "256, else through f32; groups 1 with C*R*S < 16 on kiln's direct kernel at every level; other "
                   "shapes portable)\n"
                << "cpu bf16 matmul/linear: " << kiln::cpu::bf16_path_name(kiln::cpu::bf16_path_wanted())
                << (kiln::cpu::bf16_path_wanted() == kiln::cpu::Bf16Path::portable
                        ? ""
                        : " (products with M*N*K >= 65536 at 1 thread, >= 2^20 above; smaller ones portable)")
                << "\n"
                << "onednn: " << kiln::cpu::onednn_version() << "\n";
    }
  } catch (const kiln::UsageError& e) {
    return fail(e.what(), kExitUsage);
  } catch (const std::exception& e) {
    return fail(e.what(), kExitRunError);
  }
  return 0;
}
