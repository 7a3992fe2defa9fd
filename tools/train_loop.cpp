// The training loop behind `kiln train` (see train_loop.h). One optimizer step is
// train::train_step (engine/train/train_step.h: zero grads, --accum micro-batches of forward,
// loss * (micro size / step size), backward; unscale and clip, the scheduled LR, the step and the
// loss scaler's update), the same function the memory predictor runs on the meta device.
// An epoch covers every sample once in a (seed, epoch)-determined order, ceil(N / batch) steps,
// the last one smaller (no sample dropped): --batch N on N samples is exactly one step.
#include "tools/train_loop.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "data/array_dataset.h"
#include "engine/autograd/grad_mode.h"
#include "engine/core/generator.h"
#include "engine/io/safetensors.h"
#include "engine/memory/tag.h"
#include "engine/ops/ops.h"
#include "engine/train/fit.h"
#include "kernels/cpu/threads.h"
#include "tools/alloc_flags.h"
#include "tools/train_amp.h"
#include "engine/train/kernel_option.h"
#include "engine/train/train_state.h"
#include "engine/core/devices.h"
#include "engine/train/evaluate.h"
#include "tools/mem_train.h"
#include "engine/train/memory_peak.h"
#include "tools/progress.h"
#include "tools/train_components.h"
#include "tools/train_data.h"

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

void append_ledger(const std::string& out_dir, const nlohmann::json& line) {
  const std::string path = (fs::path(out_dir) / "runs.jsonl").string();
  std::ofstream f(path, std::ios::app);
  KILN_CHECK(f.good(), "runs.jsonl: cannot open ", path, " for appending");
  f << line.dump() << '\n';
  f.flush();
  KILN_CHECK(f.good(), "runs.jsonl: write to ", path, " failed");
}

nlohmann::json epoch_json(const EpochStats& e) {
  nlohmann::json j = {{"epoch", e.epoch},         {"train_loss", e.train_loss}, {"train_acc", e.train_acc},
                      {"images_per_s", e.images_per_s}, {"seconds", e.seconds}, {"lr", e.lr}};
  j["val_loss"] = e.val_loss >= 0 ? nlohmann::json(e.val_loss) : nlohmann::json();
  j["val_acc"] = e.val_acc >= 0 ? nlohmann::json(e.val_acc) : nlohmann::json();
  j["peak_memory_bytes"] = e.peak_memory >= 0 ? nlohmann::json(e.peak_memory) : nlohmann::json();
  if (e.undefined_batches > 0) j["undefined_batches"] = e.undefined_batches;
  if (e.loss_scale > 0) {
    j["loss_scale"] = e.loss_scale;
    j["skipped_steps"] = e.skipped_steps;
  }
  return j;
}

}  // namespace

TrainResult run_training(const TrainConfig& c, std::ostream& log, std::ostream& progress) {
  return run_training(c, log, progress, &progress == &std::cerr && ::isatty(2));
}

TrainResult run_training(const TrainConfig& c, std::ostream& log, std::ostream& progress, bool progress_tty) {
  const auto t_start = Clock::now();
  KILN_CHECK(c.epochs >= 1 && c.batch >= 1 && c.accum >= 1, "train: --epochs, --batch and --accum must be >= 1");
  KILN_CHECK(c.accum <= c.batch, "train: --accum ", c.accum, " is larger than --batch ", c.batch,
             " (each micro-batch needs at least one sample)");
  const LrSchedule schedule = LrSchedule::parse(c.schedule, c.warmup);
  apply_kernels_option(c.kernels, log);
  if (c.channels_last) log << "channels-last: training batches are NHWC in memory\n";
  check_model_name(c.model);
  std::optional<SafetensorsFile> init_file;  // --init, read (and checked) before any work
  if (!c.init.empty()) {
    init_file = read_safetensors(c.init);
    // A file kiln wrote names its model: another architecture is one line, not ~130 key names.
    const auto it = init_file->metadata.find("model");
    KILN_CHECK(it == init_file->metadata.end() || it->second == c.model, "--init: ", c.init, " holds a ",
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
  KILN_CHECK(c.class_weights.empty() || (int64_t)c.class_weights.size() == num_classes, "--class-weights: ",
             c.class_weights.size(), " weights for ", num_classes, " classes");
  log << "data: " << train.source() << ", " << train.size() << " samples (" << train_channels << "x" << train_size
      << "x" << train_size << ")";
  if (data.val) log << "; val " << data.val->source() << ", " << data.val->size() << " samples";
  for (const std::string& note : data.notes) log << "; " << note;
  log << "\n";

  // ---- model, optimizer, state ----
  // The memory prediction runs first (it builds a throwaway model and restores the RNG), so on a
  // small simulated device it never competes with the real model for memory. It is for the first
  // epoch's image size (progressive resizing changes it later).
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
  const int64_t steps_per_epoch = train::steps_per_epoch(train.size(), c.batch, c.drop_last);
  // Flags that would silently do nothing.
  if (c.optimizer == "adamw" && c.momentum != 0)
    log << "warning: --momentum " << c.momentum << " is ignored by adamw (its betas are 0.9, 0.999)\n";
  if (c.warmup > steps_per_epoch * c.epochs)
    log << "warning: --warmup " << c.warmup << " is longer than the run (" << steps_per_epoch * c.epochs
        << " steps): the LR never reaches --lr " << c.lr << "\n";
  int64_t start_epoch = 0, step = 0;
  CheckpointState resumed;
  if (!c.resume.empty()) {
    CheckpointState st = resumed = load_checkpoint(c.resume, *model, *opt, c.model, num_classes, device);
    start_epoch = st.epoch;
    step = st.step;
    global_rng() = st.rng;
    KILN_CHECK(start_epoch <= c.epochs, "--resume: ", c.resume, " has already trained ", start_epoch,
               " epochs but --epochs is ", c.epochs);
    log << "resume: " << c.resume << " at epoch " << start_epoch << ", step " << step << "\n";
  }
  Tensor class_weights;
  if (!c.class_weights.empty()) {
    std::vector<float> w(c.class_weights.begin(), c.class_weights.end());
    class_weights = to_device(tensor_from(w, {num_classes}), device);
  }
  log << "model: " << c.model << ", " << model->num_parameters() << " parameters, " << num_classes
      << " classes; device " << device.str() << ", " << cpu::num_threads() << " threads; " << steps_per_epoch
      << " steps/epoch\n";
  if (!c.out.empty()) fs::create_directories(c.out);

  AmpTraining amp(c, device);
  if (amp.enabled() && resumed.has_amp) {
    amp.load_state(resumed.amp_scale, resumed.amp_growth_tracker, resumed.amp_skipped_steps);
  } else if (amp.enabled() && !c.resume.empty()) {
    log << "amp: " << c.resume << " has no loss scaler state (saved without --amp); starting from the initial scale\n";
  }
  if (amp.enabled()) log << "amp: f16 autocast, loss scale " << amp.loss_scale() << "\n";
  TrainResult result;
  FirstStepRecorder first_step(c.alloc, device);
  std::unique_ptr<ProgressLine> bar;
  train::FitOptions fo;
  fo.epochs = c.epochs;
  fo.batch = c.batch;
  fo.drop_last = c.drop_last;
  fo.start_epoch = start_epoch;
  fo.start_step = step;
  optim::LRSchedulePtr lr_factor;  // built on fit's first step, when it knows the run's steps
  fo.lr_at = [&](int64_t at, int64_t per_epoch, int64_t total) {
    if (!lr_factor) lr_factor = schedule.build(per_epoch, total);
    return c.lr * lr_factor->factor(at);
  };
  fo.class_weights = class_weights;
  fo.step.accum = c.accum;
  fo.step.clip = c.clip;
  fo.step.autocast = amp.enabled();
  fo.step.channels_last = c.channels_last;
  fo.detect_anomaly = c.detect_anomaly;
  fo.max_skipped_steps = c.max_skipped_steps;
  if (c.detect_anomaly) log << "detect-anomaly: every op's output and gradient is checked for inf/NaN (slow)\n";
  fo.callbacks.on_epoch_begin = [&](int64_t epoch, int64_t per_epoch) {
    reset_peak_memory(device);
    bar = std::make_unique<ProgressLine>(progress, progress_tty, epoch + 1, c.epochs, per_epoch);
    if (!first_step.done()) first_step.begin();
  };
  fo.callbacks.before_step = [&](const train::FitStep&) {
    report_bad_samples(train, log);
    memory.before_step();
  };
  fo.callbacks.on_step_end = [&](const train::FitStep& fs) {
    step = fs.global_step + 1;
    memory.after_step(log);
    bar->set_suffix(amp.progress_text());
    bar->update(fs.step_in_epoch + 1, fs.mean_loss, fs.seen);
    if (!first_step.done()) {
      bar->finish();
      first_step.end(log);
    }
  };
  fo.callbacks.on_memory_growth = [&](const train::MemoryGrowth& g) {
    log << g.message() << "\n";
  };
  fo.callbacks.on_epoch_end = [&](EpochStats& es) {
    report_bad_samples(train, log);
    bar->finish();
    if (amp.enabled()) log << "amp: loss scale " << es.loss_scale << ", " << es.skipped_steps << " skipped steps\n";
    if (data.val) report_bad_samples(*data.val, log);
    es.peak_memory = peak_memory_bytes(device);
    char mem[32], line[256];
    std::snprintf(line, sizeof line,
                  "epoch %lld/%lld  train loss %.4f acc %.2f%%  val loss %s acc %s  %.0f img/s  %.1f s  peak %s  "
                  "lr %.4g",
                  (long long)es.epoch, (long long)c.epochs, es.train_loss, 100 * es.train_acc,
                  es.val_loss >= 0 ? std::to_string(es.val_loss).substr(0, 6).c_str() : "-",
                  es.val_acc >= 0 ? (std::to_string(100 * es.val_acc).substr(0, 5) + "%").c_str() : "-",
                  es.images_per_s, es.seconds, format_bytes(es.peak_memory, mem, sizeof mem), es.lr);
    log << line << std::endl;
    memory.after_epoch(es.epoch, log);
    log << "memory epoch " << es.epoch << ": " << format_tag_peaks(device) << "\n";
    if (es.undefined_batches > 0)
      log << "train: " << es.undefined_batches << " batches left out in epoch " << es.epoch
          << " (their loss is undefined: empty, or every target of class weight 0)\n";
    if (train.bad_count() > 0 || (data.val && data.val->bad_count() > 0))
      log << "data: " << train.bad_count() + (data.val ? data.val->bad_count() : 0)
          << " bad samples skipped so far (listed above)\n";
    const bool last = es.epoch == c.epochs;
    if (!c.out.empty() && (last || (c.checkpoint_every > 0 && es.epoch % c.checkpoint_every == 0))) {
      CheckpointState st{es.epoch, step, global_rng()};
      if (amp.enabled()) {
        st.has_amp = true;
        st.amp_scale = amp.scaler().current_scale();
        st.amp_growth_tracker = amp.scaler().growth_tracker();
        st.amp_skipped_steps = amp.skipped_steps();
      }
      save_checkpoint((fs::path(c.out) / "checkpoint.safetensors").string(), *model, *opt, st, c.model, num_classes,
                      c.to_json());
    }
    result.epochs.push_back(es);
  };
  train::FitResult fr;
  try {
    fr = train::fit(*model, *opt, amp.scaler(), train, data.val.get(), fo);
  } catch (const OutOfMemory& e) {
    // The same remedies as the stop before the first step, from meta runs, not proportional guesses.
    throw OutOfMemory(memory.out_of_memory(e.what(), [&] {
      opt.reset();
      model.reset();
    }));
  }
  step = fr.steps;
  result.steps = step;
  if (!c.save.empty()) {
    save_weights(c.save, *model, c.model, num_classes, train_channels, train_size);
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
  j["data"] = data.ledger;
  j["data"]["bad_samples"] = train.bad_count() + (data.val ? data.val->bad_count() : 0);
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
  j["images_per_s"] = result.epochs.empty() ? 0.0 : ips / (double)result.epochs.size();
  j["peak_memory_bytes"] = peak >= 0 ? nlohmann::json(peak) : nlohmann::json();
  j["wall_s"] = result.wall_s;
  j["memory"] = memory.to_json();
  j["amp"] = amp.ledger_json();
  if (!c.out.empty()) append_ledger(c.out, j);
  result.ledger_line = j;
  return result;
}

}  // namespace kiln
