// The training loop behind `kiln train` (see train_loop.h). One optimizer step is
// train::train_step (engine/train/train_step.h: zero grads, --accum micro-batches of forward,
// loss * (micro size / step size), backward; unscale and clip, the scheduled LR, the step and the
// loss scaler's update), the same function the memory predictor runs on the meta device.
// An epoch covers every sample once in a (seed, epoch)-determined order, ceil(N / batch) steps,
// the last one smaller (no sample dropped): --batch N on N samples is exactly one step.
#include "tools/train_loop.h"

#include "engine/core/usage_error.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "data/array_dataset.h"
#include "data/image_options.h"
#include "engine/autograd/grad_mode.h"
#include "engine/core/generator.h"
#include "engine/dist/process_group.h"
#include "engine/dist/shard.h"
#include "engine/io/atomic_file.h"
#include "engine/io/safetensors.h"
#include "engine/memory/tag.h"
#include "engine/ops/ops.h"
#include "engine/train/data_parallel.h"
#include "engine/train/fit.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/threads.h"
#include "tools/alloc_flags.h"
#include "tools/batch_memory.h"
#include "tools/train_amp.h"
#include "engine/train/kernel_option.h"
#include "engine/train/train_state.h"
#include "engine/core/devices.h"
#include "engine/train/evaluate.h"
#include "engine/train/segment_task.h"
#include "models/registry.h"
#include "tools/mem_train.h"
#include "engine/train/memory_peak.h"
#include "engine/train/run_ledger.h"
#include "tools/progress.h"
#include "tools/resume_check.h"
#include "tools/train_components.h"
#include "tools/train_data.h"
#include "tools/train_ranks.h"

namespace kiln {
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string now_iso8601() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// A number, or null when it is NaN (an undefined metric: JSON has no NaN).
nlohmann::json number_or_null(double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); }

nlohmann::json epoch_json(const EpochStats& e) {
  nlohmann::json j = {{"epoch", e.epoch},         {"train_loss", e.train_loss}, {"train_acc", e.train_acc},
                      {"images_per_s", e.images_per_s}, {"seconds", e.seconds}, {"lr", e.lr}};
  j["val_loss"] = e.val_loss >= 0 ? nlohmann::json(e.val_loss) : nlohmann::json();
  j["val_acc"] = e.val_acc >= 0 ? nlohmann::json(e.val_acc) : nlohmann::json();
  if (e.val_segment) {  // --task segment: the whole validation set's metrics (engine/train/segment_metrics.h)
    const train::SegmentMetrics& m = *e.val_segment;
    j["val_pixel_acc"] = number_or_null(m.pixel_accuracy);
    j["val_miou"] = number_or_null(m.mean_iou);
    j["val_mean_dice"] = number_or_null(m.mean_dice);
    nlohmann::json iou = nlohmann::json::array(), dice = nlohmann::json::array();
    for (int64_t k = 0; k < m.num_classes; ++k) {
      iou.push_back(number_or_null(m.iou[(size_t)k]));  // null: the class is in neither target nor prediction
      dice.push_back(number_or_null(m.dice[(size_t)k]));
    }
    j["val_iou"] = iou;
    j["val_dice"] = dice;
    j["val_pixels"] = m.pixels;
    j["ignore_background"] = m.ignore_background;
    j["val_baseline_miou"] = number_or_null(train::all_background_metrics(m).mean_iou);  // all background
  }
  j["peak_memory_bytes"] = e.peak_memory >= 0 ? nlohmann::json(e.peak_memory) : nlohmann::json();
  if (e.undefined_batches > 0) j["undefined_batches"] = e.undefined_batches;
  if (e.loss_scale > 0) {
    j["loss_scale"] = e.loss_scale;
    j["skipped_steps"] = e.skipped_steps;
  }
  return j;
}

// The sizes a schedule gives in `epochs` epochs: "16 for epochs 1-2" or "16 for epochs 1-5, 20 for epoch 6".
std::string sizes_used(const ImageSizeSchedule& sched, int64_t epochs) {
  std::string out;
  for (int64_t e = 0; e < epochs;) {
    const int size = sched.at_epoch(e);
    int64_t end = e;
    while (end + 1 < epochs && sched.at_epoch(end + 1) == size) ++end;
    out += str_cat(out.empty() ? "" : ", ", size, end > e ? " for epochs " : " for epoch ", e + 1);
    if (end > e) out += str_cat("-", end + 1);
    e = end + 1;
  }
  return out;
}

// --out is created when missing; --save's folder must exist. Both must take a new file.
void check_output_folders(const TrainConfig& c) {
  if (!c.out.empty()) {
    std::error_code ec;
    fs::create_directories(c.out, ec);
    if (ec && !fs::is_directory(c.out))
      throw Error(str_cat("--out ", c.out, ": cannot create the folder (", ec.message(), ")"));
    check_writable_dir(c.out, "--out");
  }
  if (!c.save.empty()) {
    KILN_CHECK(!fs::is_directory(c.save), "--save ", c.save, ": is a folder (expected a file name such as ",
               (fs::path(c.save) / "weights.safetensors").string(), ")");
    const fs::path parent = fs::path(c.save).parent_path();
    check_writable_dir(parent.empty() ? "." : parent.string(), str_cat("--save ", c.save, ": its folder"));
  }
}

}  // namespace

void record_refused_run(const TrainConfig& c, const std::string& error, const LedgerHook& on_ledger) {
  if (c.out.empty()) return;
  std::error_code ec;
  if (!fs::is_directory(c.out, ec) || ::access(c.out.c_str(), W_OK) != 0) return;
  try {
    train::RunLedger ledger((fs::path(c.out) / "runs.jsonl").string());
    ledger.finish({{"command", "train"}, {"config", c.to_json()}, {"steps", 0}, {"epochs", nlohmann::json::array()}},
                  "refused", error);
    if (on_ledger) on_ledger(ledger.path(), ledger.run_id());
  } catch (const std::exception& e) {
    std::cerr << "runs.jsonl: could not record the refused run: " << e.what() << "\n";
  }
}

TrainResult run_training(const TrainConfig& c, std::ostream& log, std::ostream& progress, const LedgerHook& on_ledger) {
  return run_training(c, log, progress, &progress == &std::cerr && ::isatty(2), on_ledger);
}

namespace {
TrainResult run_training_started(const TrainConfig& c, std::ostream& log, std::ostream& progress, bool progress_tty,
                                 const LedgerHook& on_ledger, bool* ledger_started);
}  // namespace

TrainResult run_training(const TrainConfig& c, std::ostream& log, std::ostream& progress, bool progress_tty,
                         const LedgerHook& on_ledger) {
  bool ledger_started = false;  // from the start record on, a failure is the run's own end line
  // Data-parallel (`mpirun -n N kiln train`, engine/dist/): rank 0 prints and writes the ledger, the
  // training-state files, --save, the reports and memory files; the other ranks train silently.
  dist::ProcessGroup& group = dist::world();
  TrainConfig with_ranks = c;
  with_ranks.ranks = group.size();
  check_rank_launch(with_ranks, group);  // tools/train_ranks.h
  with_ranks.device = rank_device(c.device, group);  // one GPU per rank
  if (group.rank() != 0) {
    std::ostream& nothing = null_stream();
    return run_training_started(silent_rank_config(with_ranks), nothing, nothing, false, {}, &ledger_started);
  }
  try {
    return run_training_started(with_ranks, log, progress, progress_tty, on_ledger, &ledger_started);
  } catch (const std::exception& e) {
    if (!ledger_started) record_refused_run(c, e.what(), on_ledger);
    throw;
  }
}

namespace {
TrainResult run_training_started(const TrainConfig& c, std::ostream& log, std::ostream& progress, bool progress_tty,
                                 const LedgerHook& on_ledger, bool* ledger_started) {
  const auto t_start = Clock::now();
  KILN_USAGE_CHECK(c.epochs >= 1 && c.batch >= 1 && c.accum >= 1, "train: --epochs, --batch and --accum must be >= 1");
  KILN_USAGE_CHECK(c.accum <= c.batch, "train: --accum ", c.accum, " is larger than --batch ", c.batch,
             " (each micro-batch needs at least one sample)");
  const LrSchedule schedule = LrSchedule::parse(c.schedule, c.warmup);
  {  // --task segment's flags, before anything is read
    const bool seg = c.task == "segment";
    KILN_USAGE_CHECK(seg || !c.ignore_background, "--ignore-background applies to --task segment only");
    KILN_USAGE_CHECK(seg || c.loss == "ce", "--loss ", c.loss, " applies to --task segment only");
    KILN_USAGE_CHECK(seg || !models::is_segmentation_model(c.model), "--model ", c.model,
                     " is a segmentation model (per-pixel outputs): pass --task segment");
  }
  check_output_folders(c);  // before any data is read: a run must not train and then fail to save
  apply_kernels_option(c.kernels, log);
  if (c.channels_last) log << "channels-last: training batches are NHWC in memory\n";
  check_model_name(c.model);
  std::optional<SafetensorsFile> init_file;  // --init, read (and checked) before any work
  if (!c.init.empty()) {
    init_file = read_safetensors(c.init);
    // A file kiln wrote names its model: another architecture is one line, not ~130 key names.
    const auto it = init_file->metadata.find("model");
    KILN_CHECK(it == init_file->metadata.end() || same_model(it->second, c.model), "--init: ", c.init, " holds a ",
               it->second, ", not a ", c.model);
  }
  std::string device_note;
  const Device device = resolve_device(c.device, &device_note);
  if (!device_note.empty()) log << device_note << "\n";
  apply_device_memory(c.alloc, device, log);

  // ---- data ----
  TrainData data = open_train_data(c, device);
  DataSource& train = *data.train;
  const int64_t train_channels = train.channels(), train_size = train.image_size(c.epochs - 1);
  int64_t max_label = train.max_label();
  if (data.val) max_label = std::max(max_label, data.val->max_label());
  const int64_t num_classes =
      c.num_classes > 0 ? c.num_classes : std::max(max_label + 1, data.num_classes);
  KILN_CHECK(max_label < num_classes, "train: label ", max_label, " found in the data but --num-classes is ",
             num_classes);
  const bool segment = c.task == "segment";
  KILN_CHECK(!segment || num_classes <= train::kSegmentMaxClasses, "--task segment: ", num_classes,
             " classes; masks are 8-bit with 255 = ignore, so at most ", train::kSegmentMaxClasses);
  KILN_CHECK(c.class_weights.empty() || (int64_t)c.class_weights.size() == num_classes, "--class-weights: ",
             c.class_weights.size(), " weights for ", num_classes, " classes");
  // A schedule --epochs cuts short: the sizes actually used, and a warning (its last size is never trained).
  if (data.format == "images") {
    const ImageSizeSchedule sched = ImageSizeSchedule::parse(c.image.image_size);
    if (sched.progressive() && sched.at_epoch(c.epochs - 1) != sched.final_size()) {
      const std::string used = sizes_used(sched, c.epochs);
      log << "warning: --image-size " << c.image.image_size << " never reaches " << sched.final_size()
          << " within --epochs " << c.epochs << ": " << used << "\n";
      for (std::string& note : data.notes)
        if (note.rfind("progressive resizing: ", 0) == 0) note = "image size " + used;
    }
  }
  // What predict and export need, stored in the weights and training-state files.
  ModelCard card = make_model_card(c.model, num_classes, data, c.image, train_channels, train_size);
  card.task = c.task;
  log << "data: " << train.source() << ", " << train.size() << " samples (" << train_channels << "x" << train_size
      << "x" << train_size << ")";
  if (data.val) log << "; val " << data.val->source() << ", " << data.val->size() << " samples";
  for (const std::string& note : data.notes) log << "; " << note;
  log << "\n";

  // ---- a training state to resume: compared with the flags before anything is predicted or loaded ----
  std::optional<CheckpointFile> resume_file;
  bool load_optimizer_state = true, restart_epoch = false;
  if (!c.resume.empty()) {
    resume_file = read_checkpoint(c.resume, c.model, num_classes);
    const std::vector<std::string> diffs = resume_differences(resume_file->config, c);
    if (!diffs.empty() && !c.resume_override) {
      std::string list;
      for (const std::string& d : diffs) list += (list.empty() ? "" : "; ") + d;
      throw Error(str_cat("--resume: ", c.resume, " was saved with other settings: ", list,
                          " (pass the saved values, or --resume-override to train on with the new ones)"));
    }
    for (const std::string& d : diffs) log << "resume: --resume-override: " << d << "\n";
    load_optimizer_state = optimizer_state_compatible(resume_file->config, c);
    if (!load_optimizer_state)
      log << "resume: --resume-override: the saved optimizer state does not fit --optimizer " << c.optimizer
          << (resume_file->config.value("optimizer", "") == c.optimizer ? " (momentum on in one, off in the other)" : "")
          << "; it is not loaded, the optimizer starts fresh\n";
    // The interrupted epoch's batches depend on these; with new values the epoch starts over.
    for (const std::string& d : diffs)
      for (const char* key : {"batch:", "batch_memory:", "drop_last:", "limit:", "seed:", "data:"})
        if (d.rfind(key, 0) == 0) restart_epoch = true;
  }

  // ---- model, optimizer, state ----
  // --task segment: the model must give (N, K, H, W) at the masks' size (a meta forward, no arithmetic).
  if (segment) check_segment_model(c.model, num_classes, train_channels, train.image_size(0));
  // The memory prediction runs first (it builds a throwaway model and restores the RNG), so on a
  // small simulated device it never competes with the real model for memory. It is for the first
  // epoch's image size (progressive resizing changes it later).
  std::unique_ptr<BatchMemoryRun> batch_memory;  // --batch-memory: each size bucket's batch from meta runs
  if (!c.batch_memory.empty())
    batch_memory = std::make_unique<BatchMemoryRun>(c, num_classes, dynamic_cast<BucketedImageSource&>(train),
                                                    dynamic_cast<BucketedImageSource*>(data.val.get()), device, log);
  TrainMemoryMonitor memory(c, num_classes, train.channels(), train.image_size(0), train.image_size(0), device,
                            data.format == "images", log);
  manual_seed(c.seed);
  nn::ModulePtr model = build_model(c.model, num_classes, train_channels, train_size);
  model->to(device);
  if (!c.init.empty()) {
    NamedTensors state;
    for (const NamedArray& a : init_file->tensors) state.emplace_back(a.name, from_host_array(a.array, device));
    init_file.reset();
    model->load_state_dict(state, true);
    log << "init: loaded " << c.init << "\n";
  }
  memory.apply(*model);
  std::unique_ptr<optim::Optimizer> opt = build_optimizer(c, *model);
  dist::ProcessGroup& group = dist::world();
  const int ranks = group.size();
  // --batch is per rank (PyTorch DDP's rule); an epoch counts global batches of --batch x ranks.
  const int64_t global_batch = dist::global_batch(c.batch, ranks);
  const int64_t steps_per_epoch = train.planned_steps_per_epoch() > 0
                                      ? train.planned_steps_per_epoch()
                                      : train::steps_per_epoch(train.size(), global_batch, c.drop_last);
  // Flags that would silently do nothing.
  if (c.optimizer == "adamw" && c.momentum != 0)
    log << "warning: --momentum " << c.momentum << " is ignored by adamw (its betas are 0.9, 0.999)\n";
  if (c.warmup > steps_per_epoch * c.epochs)
    log << "warning: --warmup " << c.warmup << " is longer than the run (" << steps_per_epoch * c.epochs
        << " steps): the LR never reaches --lr " << c.lr << "\n";
  int64_t start_epoch = 0, step = 0, start_step_in_epoch = 0;
  train::EpochSums start_sums;
  CheckpointState resumed;
  if (resume_file) {
    load_checkpoint_tensors(*resume_file, *model, load_optimizer_state ? opt.get() : nullptr, device);
    CheckpointState st = resumed = resume_file->state;
    resume_file.reset();  // the file's host copy is no longer needed
    start_epoch = st.epoch;
    step = st.step;
    global_rng() = st.rng;
    KILN_CHECK(start_epoch < c.epochs || (start_epoch == c.epochs && st.step_in_epoch == 0), "--resume: ", c.resume,
               " has already trained ", start_epoch, " epochs", st.step_in_epoch > 0 ? " and part of the next" : "",
               " but --epochs is ", c.epochs);
    if (st.step_in_epoch > 0 && restart_epoch) {
      log << "resume: --resume-override: epoch " << start_epoch + 1 << " starts over (its batches changed)\n";
    } else if (st.step_in_epoch > 0) {
      KILN_CHECK(st.step_in_epoch < steps_per_epoch, "--resume: ", c.resume, " was saved after step ",
                 st.step_in_epoch, " of an epoch, but an epoch has ", steps_per_epoch, " steps");
      start_step_in_epoch = st.step_in_epoch;
      start_sums = {st.epoch_loss_sum, st.epoch_correct, st.epoch_seen, st.epoch_undefined_batches,
                    st.epoch_metric_total};
    }
    log << "resume: " << c.resume << " at epoch " << start_epoch;
    if (start_step_in_epoch > 0) log << " + " << start_step_in_epoch << "/" << steps_per_epoch << " steps";
    log << ", step " << step << "\n";
  }
  std::unique_ptr<train::DataParallel> data_parallel;
  if (ranks > 1) {
    if (batch_memory) {  // every rank planned its batches from its own meta runs: they must agree
      int64_t mine = 0, place = 0;
      for (const BucketMemory& b : batch_memory->buckets()) mine += ++place * b.batch;
      KILN_CHECK(group.sum(mine) == mine * ranks, "train: --batch-memory: the ranks planned different batches "
                 "(rank ", group.rank(), "'s: a different device budget or build?)");
    }
    train::DataParallelOptions dpo;
    dpo.bucket_bytes = std::max<int64_t>(1, std::llround(c.bucket_mb * (1 << 20)));
    dpo.first_bucket_bytes = std::min<int64_t>(dpo.bucket_bytes, 1 << 20);
    group.set_timeout(c.dist_timeout);
    data_parallel = std::make_unique<train::DataParallel>(group, *model, dpo);
    data_parallel->set_steps_done(step);
    data_parallel->broadcast_state(0);  // rank 0's weights and buffers (fresh, --init or --resume) everywhere
    log << "data-parallel: " << ranks << " ranks (" << group.backend() << "), "
        << (batch_memory ? std::string("batches of each size bucket per rank by --batch-memory (above)")
                         : str_cat("batch ", c.batch, " per rank, ", global_batch, " per step"))
        << "; gradients all-reduced in " << data_parallel->buckets().size()
        << " buckets of up to " << c.bucket_mb << " MiB"
        << (data_parallel->overlaps() ? ", during backward" : ", after backward") << "\n";
    if (c.sync_bn) {
      data_parallel->sync_batch_norm();
      log << "data-parallel: --sync-bn: BatchNorm statistics summed over the " << ranks << " ranks\n";
    } else {
      for (const auto& [name, b] : model->named_buffers())
        if (name.find("running_mean") != std::string::npos) {
          log << "warning: data-parallel: " << c.model << " has BatchNorm; its statistics are each rank's own "
              << "(use --sync-bn for the global batch's), so the result depends on the number of ranks\n";
          break;
        }
    }
  }
  Tensor class_weights;
  if (!c.class_weights.empty()) {
    std::vector<float> w(c.class_weights.begin(), c.class_weights.end());
    class_weights = to_device(tensor_from(w, {num_classes}), device);
  }
  log << "model: " << c.model << ", " << model->num_parameters() << " parameters, " << num_classes
      << " classes" << (segment ? " (task segment)" : "") << "; device " << device.str() << ", " << cpu::num_threads() << " threads; " << steps_per_epoch
      << " steps/epoch\n";

  AmpTraining amp(c, device);
  if (amp.enabled() && resumed.has_amp) {
    amp.load_state(resumed.amp_scale, resumed.amp_growth_tracker, resumed.amp_skipped_steps);
  } else if (amp.enabled() && !c.resume.empty()) {
    log << "amp: " << c.resume << " has no loss scaler state (saved without --amp); starting from the initial scale\n";
  }
  if (amp.enabled()) log << "amp: f16 autocast, loss scale " << amp.loss_scale() << "\n";
  TrainResult result;
  // The run ledger: a start record now (a killed run is still listed), curve points, epochs, the end.
  train::RunLedger ledger(c.out.empty() ? "" : (fs::path(c.out) / "runs.jsonl").string());
  train::CurveRecorder curve(c.curve_every, device, amp.enabled());
  auto ledger_written = [&] {
    if (on_ledger && ledger.enabled()) on_ledger(ledger.path(), ledger.run_id());
  };
  ledger.start({{"command", "train"}, {"config", c.to_json()}, {"device", device.str()}, {"ranks", ranks}, {"data", data.ledger},
                {"image_size", train_size}, {"model_parameters", model->num_parameters()},
                {"start_epoch", start_epoch}, {"steps_per_epoch", steps_per_epoch}, {"memory", memory.to_json()}});
  *ledger_started = true;
  FirstStepRecorder first_step(c.alloc, device);
  std::unique_ptr<ProgressLine> bar;
  train::FitOptions fo;
  fo.epochs = c.epochs;
  fo.batch = c.batch;
  fo.drop_last = c.drop_last;
  fo.start_epoch = start_epoch;
  fo.start_step = step;
  fo.start_step_in_epoch = start_step_in_epoch;
  fo.start_sums = start_sums;
  optim::LRSchedulePtr lr_factor;  // built on fit's first step, when it knows the run's steps
  fo.lr_at = [&](int64_t at, int64_t per_epoch, int64_t total) {
    if (!lr_factor) lr_factor = schedule.build(per_epoch, total);
    return c.lr * lr_factor->factor(at);
  };
  fo.class_weights = class_weights;
  if (segment) {  // per-pixel loss and pixel counts; validation = the whole set's confusion matrix
    fo.classification = false;
    train::use_segmentation_step(&fo.step, class_weights, c.loss);
    fo.evaluate = [&](nn::Module& m, DataSource& val, int64_t epoch) {
      return train::evaluate_segmentation(m, val, c.batch, epoch, class_weights, c.ignore_background);
    };
  }
  fo.step.accum = c.accum;
  fo.step.clip = c.clip;
  fo.step.autocast = amp.enabled();
  fo.step.channels_last = c.channels_last;
  fo.step.data_parallel = data_parallel.get();
  fo.detect_anomaly = c.detect_anomaly;
  fo.max_skipped_steps = c.max_skipped_steps;
  if (c.detect_anomaly) log << "detect-anomaly: every op's output and gradient is checked for inf/NaN (slow)\n";
  fo.callbacks.on_epoch_begin = [&](int64_t epoch, int64_t per_epoch) {
    reset_peak_memory(device);
    curve.epoch_begin();
    bar = std::make_unique<ProgressLine>(progress, progress_tty, epoch + 1, c.epochs, per_epoch);
    if (!first_step.done()) first_step.begin();
  };
  // A test hook of the data-parallel fault path: KILN_TEST_FAIL_RANK=R:S makes rank R throw before step S (1-based).
  int fail_rank = -1;
  int64_t fail_step = -1;
  if (const char* v = std::getenv("KILN_TEST_FAIL_RANK"))
    if (std::sscanf(v, "%d:%lld", &fail_rank, (long long*)&fail_step) != 2) fail_rank = -1;
  // And of --dist-timeout: KILN_TEST_HANG_RANK=R:S makes rank R stop itself (SIGSTOP: it hangs) before step
  // S, KILN_TEST_KILL_RANK=R:S kill itself (SIGKILL: it dies).
  int signal_rank[2] = {-1, -1};
  int64_t signal_step[2] = {-1, -1};
  const int signal_of[2] = {SIGSTOP, SIGKILL};
  for (int k = 0; k < 2; ++k)
    if (const char* v = std::getenv(k == 0 ? "KILN_TEST_HANG_RANK" : "KILN_TEST_KILL_RANK"))
      if (std::sscanf(v, "%d:%lld", &signal_rank[k], (long long*)&signal_step[k]) != 2) signal_rank[k] = -1;
  // Bad samples: rank 0 reports to the log; another rank (which decodes its own shard of an image source)
  // to stderr, prefixed with its rank. train_bad: the training source's, over the ranks, at the last epoch end.
  const std::string bad_prefix = group.rank() == 0 ? "" : str_cat("rank ", group.rank(), ": ");
  auto report_bad = [&](DataSource& d) { report_bad_samples(d, group.rank() == 0 ? log : std::cerr, bad_prefix); };
  int64_t train_bad = train.bad_count();
  fo.callbacks.before_step = [&](const train::FitStep& fs) {
    for (int k = 0; k < 2; ++k)
      if (signal_rank[k] == group.rank() && fs.global_step + 1 == signal_step[k]) std::raise(signal_of[k]);
    if (fail_rank == group.rank() && fs.global_step + 1 == fail_step)
      throw Error(str_cat("KILN_TEST_FAIL_RANK: rank ", fail_rank, " fails before step ", fail_step,
                          " (a test of the fault path)"));
    report_bad(train);
    memory.before_step();
    if (batch_memory) batch_memory->before_step();
  };
  const std::string state_path = c.out.empty() ? "" : (fs::path(c.out) / "checkpoint.safetensors").string();
  for (const std::string& target : {state_path, c.save})
    if (!target.empty())
      for (const std::string& t : remove_stale_temporaries(target))
        log << "removed " << t << " (the temporary of a run that was killed while writing it)\n";
  // The training state after `step` optimizer steps: `epoch` epochs done plus `step_in_epoch` steps of the next.
  auto save_state = [&](int64_t epoch, int64_t step_in_epoch, const train::EpochSums& sums) {
    CheckpointState st{epoch, step, global_rng()};
    st.step_in_epoch = step_in_epoch;
    st.epoch_loss_sum = sums.loss_sum;
    st.epoch_correct = sums.correct;
    st.epoch_seen = sums.seen;
    st.epoch_undefined_batches = sums.undefined_batches;
    st.epoch_metric_total = sums.metric_total;
    if (amp.enabled()) {
      st.has_amp = true;
      st.amp_scale = amp.scaler().current_scale();
      st.amp_growth_tracker = amp.scaler().growth_tracker();
      st.amp_skipped_steps = amp.skipped_steps();
    }
    save_checkpoint(state_path, *model, *opt, st, c.model, num_classes, c.to_json(), &card);
  };
  fo.callbacks.on_step_end = [&](const train::FitStep& fs) {
    step = fs.global_step + 1;
    if (batch_memory) batch_memory->after_step(fs);
    if (auto point = curve.observe(fs)) ledger.step(*point);
    // Every --checkpoint-every Nsteps; one due at an epoch's last step is written at the epoch's end.
    if (!state_path.empty() && c.checkpoint_steps > 0 && step % c.checkpoint_steps == 0 &&
        fs.step_in_epoch + 1 < fs.steps_per_epoch)
      save_state(fs.epoch, fs.step_in_epoch + 1,
                 {fs.loss_sum, fs.correct, fs.seen, fs.undefined_batches, fs.metric_total});
    memory.after_step(log);
    std::string suffix = amp.progress_text() + (batch_memory ? batch_memory->progress_text() : "");
    if (segment && fs.metric_total > 0) {  // the epoch's running pixel accuracy
      char acc[48];
      std::snprintf(acc, sizeof acc, "  pixel acc %.2f%%", 100.0 * (double)fs.correct / (double)fs.metric_total);
      suffix += acc;
    }
    bar->set_suffix(suffix);
    bar->update(fs.step_in_epoch + 1, fs.mean_loss, fs.seen);
    if (!first_step.done()) {
      bar->finish();
      first_step.end(log);
    }
  };
  fo.callbacks.on_memory_growth = [&](const train::MemoryGrowth& g) {
    log << g.message() << "\n";
  };
  train::DataParallel::CommTimes comm_before;  // the totals at the last epoch's end
  fo.callbacks.on_epoch_end = [&](EpochStats& es) {
    report_bad(train);
    // Data-parallel: an image source decodes each rank's shard, so each rank met its own bad samples.
    train_bad = ranks > 1 ? group.sum(train.bad_count()) : train.bad_count();
    bar->finish();
    if (amp.enabled()) log << "amp: loss scale " << es.loss_scale << ", " << es.skipped_steps << " skipped steps\n";
    if (data.val) report_bad_samples(*data.val, log);
    es.peak_memory = batch_memory ? batch_memory->take_epoch_peak() : peak_memory_bytes(device);
    char mem[32], line[384];
    std::snprintf(line, sizeof line,
                  "epoch %lld/%lld  train loss %.4f acc %.2f%%  val loss %s acc %s  %.0f img/s  %.1f s  peak %s  "
                  "lr %.4g",
                  (long long)es.epoch, (long long)c.epochs, es.train_loss, 100 * es.train_acc,
                  es.val_loss >= 0 ? std::to_string(es.val_loss).substr(0, 6).c_str() : "-",
                  es.val_acc >= 0 ? (std::to_string(100 * es.val_acc).substr(0, 5) + "%").c_str() : "-",
                  es.images_per_s, es.seconds, format_bytes(es.peak_memory, mem, sizeof mem), es.lr);
    if (es.val_segment) {  // replaces the classification line: pixel accuracy, mIoU, Dice per class
      const train::SegmentMetrics& m = *es.val_segment;
      std::string dice;
      for (int64_t k = 0; k < m.num_classes; ++k) {
        char d[16];
        std::snprintf(d, sizeof d, "%.3f", m.dice[(size_t)k]);
        dice += (k ? "/" : "") + std::string(d);
      }
      std::snprintf(line, sizeof line,
                    "epoch %lld/%lld  train loss %.4f pixel acc %.2f%%  val loss %.4f pixel acc %.2f%% mIoU %.2f%%%s  "
                    "%.0f img/s  %.1f s  peak %s  lr %.4g",
                    (long long)es.epoch, (long long)c.epochs, es.train_loss, 100 * es.train_acc, es.val_loss,
                    100 * m.pixel_accuracy, 100 * m.mean_iou, m.ignore_background ? " (no background)" : "",
                    es.images_per_s, es.seconds, format_bytes(es.peak_memory, mem, sizeof mem), es.lr);
      log << line << "  dice " << dice << std::endl;
    } else if (segment) {
      std::snprintf(line, sizeof line, "epoch %lld/%lld  train loss %.4f pixel acc %.2f%%  (no --val)  %.0f img/s  "
                    "%.1f s  peak %s  lr %.4g",
                    (long long)es.epoch, (long long)c.epochs, es.train_loss, 100 * es.train_acc, es.images_per_s,
                    es.seconds, format_bytes(es.peak_memory, mem, sizeof mem), es.lr);
      log << line << std::endl;
    } else {
      log << line << std::endl;
    }
    memory.after_epoch(es.epoch, log);
    if (data_parallel && data_parallel->overlaps())
      log << "data-parallel: " << data_parallel->started_during_backward() << " of "
          << data_parallel->buckets().size() << " buckets started their all-reduce during the last backward\n";
    if (data_parallel) {  // this epoch's steps: the difference from the last epoch's totals
      const train::DataParallel::CommTimes t = data_parallel->comm_times();
      const int64_t n = std::max<int64_t>(1, t.steps - comm_before.steps);
      char text[200];
      std::snprintf(text, sizeof text, "data-parallel: communication per step (mean of %lld): %.2f ms not hidden "
                    "by backward, %.2f ms all-reduce in all\n", (long long)(t.steps - comm_before.steps),
                    1e3 * (t.wait_s - comm_before.wait_s) / (double)n,
                    1e3 * (t.all_reduce_s - comm_before.all_reduce_s) / (double)n);
      log << text;
      comm_before = t;
    }
    log << "memory epoch " << es.epoch << ": " << (batch_memory ? batch_memory->epoch_text() : format_tag_peaks(device))
        << "\n";
    if (es.undefined_batches > 0)
      log << "train: " << es.undefined_batches << " batches left out in epoch " << es.epoch
          << " (their loss is undefined: empty, or every target of class weight 0)\n";
    if (train_bad > 0 || (data.val && data.val->bad_count() > 0))
      log << "data: " << train_bad + (data.val ? data.val->bad_count() : 0) << " bad samples skipped so far ("
          << (ranks > 1 ? "summed over the ranks' shards; " : "") << "listed above)\n";
    const bool last = es.epoch == c.epochs;
    if (!state_path.empty() && (last || (c.checkpoint_every > 0 && es.epoch % c.checkpoint_every == 0) ||
                                (c.checkpoint_steps > 0 && step % c.checkpoint_steps == 0)))
      save_state(es.epoch, 0, {});
    result.epochs.push_back(es);
    ledger.epoch({{"steps", step}, {"stats", epoch_json(es)}});
    ledger_written();
  };
  train::FitResult fr;
  auto record_failure = [&](const std::string& error) {
    nlohmann::json failed = {{"command", "train"}, {"config", c.to_json()}, {"steps", step},
                             {"wall_s", seconds_since(t_start)}, {"epochs", nlohmann::json::array()}};
    for (const EpochStats& es : result.epochs) failed["epochs"].push_back(epoch_json(es));
    try {
      ledger.finish(failed, "failed", error);
      ledger_written();
    } catch (const std::exception& le) {
      log << "runs.jsonl: could not record the failure: " << le.what() << "\n";
    }
  };
  try {
    // Validation runs on rank 0 alone (it changes no state; the other ranks would only repeat it).
    fr = train::fit(*model, *opt, amp.scaler(), train, group.rank() == 0 ? data.val.get() : nullptr, fo);
  } catch (const OutOfMemory& e) {
    // The same remedies as the stop before the first step, from meta runs, not proportional guesses.
    OutOfMemory full(memory.out_of_memory(e.what(), [&] {
      opt.reset();
      model.reset();
    }));
    record_failure(full.what());
    throw full;
  } catch (const std::exception& e) {
    record_failure(e.what());
    throw;
  }
  step = fr.steps;
  result.steps = step;
  if (!c.save.empty()) {
    save_weights(c.save, *model, card);
    log << "saved weights to " << c.save << "\n";
  }
  result.wall_s = seconds_since(t_start);

  // ---- the run ledger ----
  nlohmann::json j;
  j["time"] = now_iso8601();
  j["command"] = "train";
  j["config"] = c.to_json();
  j["config"]["num_classes"] = num_classes;
  j["device"] = device.str();
  j["threads"] = cpu::num_threads();
  j["cpu_isa"] = cpu::cpu_isa_name(cpu::cpu_isa());  // the CPU kernels' instruction set (kernels/cpu/cpu_isa.h)
  j["ranks"] = ranks;
  j["data"] = data.ledger;
  j["data"]["bad_samples"] = train_bad + (data.val ? data.val->bad_count() : 0);
  j["model_parameters"] = model->num_parameters();
  j["schedule"] = schedule.str();
  j["start_epoch"] = start_epoch;
  j["steps"] = step;
  j["epochs"] = nlohmann::json::array();
  double ips = 0;
  int64_t peak = -1;
  for (const EpochStats& e : result.epochs) {
    j["epochs"].push_back(epoch_json(e));
    ips += e.images_per_s;
    peak = std::max(peak, e.peak_memory);
  }
  const EpochStats* fin = result.epochs.empty() ? nullptr : &result.epochs.back();
  j["final_train_acc"] = fin ? nlohmann::json(fin->train_acc) : nlohmann::json();
  j["final_val_acc"] = fin && fin->val_acc >= 0 ? nlohmann::json(fin->val_acc) : nlohmann::json();
  j["final_train_loss"] = fin ? nlohmann::json(fin->train_loss) : nlohmann::json();
  j["final_val_loss"] = fin && fin->val_loss >= 0 ? nlohmann::json(fin->val_loss) : nlohmann::json();
  if (fin && fin->val_segment) {
    j["final_val_miou"] = number_or_null(fin->val_segment->mean_iou);
    j["final_val_mean_dice"] = number_or_null(fin->val_segment->mean_dice);
    j["val_baseline_miou"] = number_or_null(train::all_background_metrics(*fin->val_segment).mean_iou);
    char line[160];
    std::snprintf(line, sizeof line, "segment: val mIoU %.2f%% after epoch %lld; predicting background everywhere "
                  "gives %.2f%%", 100 * fin->val_segment->mean_iou, (long long)fin->epoch,
                  100 * train::all_background_metrics(*fin->val_segment).mean_iou);
    log << line << "\n";
  }
  j["images_per_s"] = result.epochs.empty() ? 0.0 : ips / (double)result.epochs.size();
  j["peak_memory_bytes"] = peak >= 0 ? nlohmann::json(peak) : nlohmann::json();
  j["wall_s"] = result.wall_s;
  j["memory"] = memory.to_json();
  j["amp"] = amp.ledger_json();
  j["image_size"] = train_size;
  if (batch_memory) j["batch_memory"] = batch_memory->to_json();
  if (data_parallel) {  // rank 0's view, over the whole run
    const train::DataParallel::CommTimes t = data_parallel->comm_times();
    j["data_parallel"] = {{"steps", t.steps}, {"comm_wait_s", t.wait_s}, {"all_reduce_s", t.all_reduce_s},
                          {"comm_wait_ms_per_step", 1e3 * t.mean_wait_s()},
                          {"all_reduce_ms_per_step", 1e3 * t.mean_all_reduce_s()}};
  }
  ledger.finish(j, "ok");
  j["record"] = "end";
  j["run"] = ledger.run_id();
  j["status"] = "ok";
  ledger_written();
  result.ledger_line = j;
  return result;
}
}  // namespace

}  // namespace kiln
