// A training run (see run.h). The order of a run:
//   Run::Run   ranks -> check the options -> output folders -> device -> data (classes, model card)
//              -> a --resume state (read, compared) -> the memory plan (pre-flight; may refuse)
//   train()    model + optimizer -> restore the state -> data-parallel -> amp -> ledger start
//              -> train::fit with the loop below -> --save -> ledger end
//   the loop   before each step: bad-sample reports, the memory counters; after it: curve point,
//              a training-state file every checkpoint_steps, memory notes, progress; after each epoch:
//              notes, the training-state file, the ledger's epoch record.
// An epoch covers every sample once in a (seed, epoch)-determined order, ceil(N / batch) steps, the last
// one smaller (no sample dropped) unless drop_last.
#include "engine/run/run.h"

#include "engine/core/percent.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <optional>

#include "data/bucketed_image_source.h"
#include "data/image_options.h"
#include "engine/core/devices.h"
#include "engine/core/generator.h"
#include "engine/core/usage_error.h"
#include "engine/dist/process_group.h"
#include "engine/dist/shard.h"
#include "engine/io/atomic_file.h"
#include "engine/io/safetensors.h"
#include "engine/memory/alloc_config.h"
#include "engine/memory/device_present.h"
#include "engine/memory/host_scratch.h"
#include "engine/ops/ops.h"
#include "engine/run/alloc_options.h"
#include "engine/run/amp_training.h"
#include "engine/run/batch_memory.h"
#include "engine/run/resume.h"
#include "engine/run/outside_memory.h"
#include "engine/run/run_data.h"
#include "engine/run/run_memory.h"
#include "engine/run/run_model.h"
#include "engine/run/run_peaks.h"
#include "engine/run/run_setup.h"
#include "engine/run/run_ranks.h"
#include "engine/run/run_record.h"
#include "engine/train/data_parallel.h"
#include "engine/train/kernel_option.h"
#include "engine/train/memory_peak.h"
#include "engine/train/run_ledger.h"
#include "engine/train/segment_task.h"
#include "engine/train/train_state.h"
#include "kernels/cpu/bf16_path.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/threads.h"
#include "models/registry.h"

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

// Options that contradict each other, before anything is read.
void check_options(const RunConfig& c) {
  KILN_USAGE_CHECK(c.epochs >= 1 && c.batch >= 1 && c.accum >= 1, "train: --epochs, --batch and --accum must be >= 1");
  KILN_USAGE_CHECK(c.accum <= c.batch, "train: --accum ", c.accum, " is larger than --batch ", c.batch,
                   " (each micro-batch needs at least one sample)");
  (void)LrSchedule::parse(c.schedule, c.warmup);
  const bool seg = c.task == "segment";
  KILN_USAGE_CHECK(seg || !c.ignore_background, "--ignore-background applies to --task segment only");
  KILN_USAGE_CHECK(seg || c.loss == "ce", "--loss ", c.loss, " applies to --task segment only");
  KILN_USAGE_CHECK(seg || !models::is_segmentation_model(c.model), "--model ", c.model,
                   " is a segmentation model (per-pixel outputs): pass --task segment");
}

// --out is created when missing; --save's folder must exist. Both must take a new file.
void check_output_folders(const RunConfig& c) {
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

void record_refused_run(const RunConfig& c, const std::string& error, const LedgerHook& on_ledger) {
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

struct Run::State {
  dist::ProcessGroup& group = dist::world();
  RunConfig c;
  RunOptions o;
  std::ostream& log;
  Clock::time_point t_start = Clock::now();
  bool ledger_started = false;  // from the ledger's start record on, a failure is the run's own end line
  bool trained = false;
  // prepare()
  Device device = Device::cpu();
  TrainData data;
  int64_t num_classes = 0, train_size = 0;
  bool segment = false;
  ModelCard card;
  std::optional<SafetensorsFile> init_file;  // --init, read (and checked) before any work
  ResumeState resume;
  std::unique_ptr<BatchMemoryRun> batch_memory;  // --batch-memory: each size bucket's batch from meta runs
  std::unique_ptr<TrainMemoryMonitor> memory;
  RunPlan plan;
  // train()
  RunSetup setup;  // model, optimizer, data-parallel buckets, class weights, loss scaler
  nn::ModulePtr& model = setup.model;
  std::unique_ptr<optim::Optimizer>& opt = setup.opt;
  std::unique_ptr<train::DataParallel>& data_parallel = setup.data_parallel;
  std::unique_ptr<AmpTraining>& amp = setup.amp;
  std::unique_ptr<train::RunLedger> ledger;
  std::unique_ptr<train::CurveRecorder> curve;
  std::unique_ptr<FirstStepRecorder> first_step;
  Tensor& class_weights = setup.class_weights;
  int64_t steps_per_epoch = 0, step = 0;
  RunPeaks peaks;  // the run's whole peaks on its device, measured
  std::string where_now, phase_now;  // the step or validation running now, and its plan phase (an OOM names them)
  ResumePoint start;
  int64_t train_bad = 0;  // bad training samples over the ranks, at the last epoch end
  train::DataParallel::CommTimes comm_before;  // data-parallel totals at the last epoch's end
  std::string state_path;  // OUT/checkpoint.safetensors
  RunResult result;

  State(const RunConfig& config, RunOptions options);
  void prepare();
  void open_data();
  void plan_memory();
  void build();
  void join_ranks();
  void start_ledger();
  train::FitOptions fit_options();
  void before_step(const train::FitStep& fs);
  void on_step_end(const train::FitStep& fs);
  void on_epoch_end(EpochStats& es);
  void epoch_notes(const EpochStats& es);
  void save_state(int64_t epoch, int64_t step_in_epoch, const train::EpochSums& sums);
  void ledger_written() {
    if (o.events.on_ledger && ledger && ledger->enabled()) o.events.on_ledger(ledger->path(), ledger->run_id());
  }
  void record_failure(const std::string& error);
  void finish();
  void report_bad(DataSource& d) {
    report_bad_samples(d, group.rank() == 0 ? log : std::cerr, group.rank() == 0 ? "" : str_cat("rank ", group.rank(), ": "));
  }
};

namespace {
std::ostream& log_of(const RunOptions& o) { return o.log ? *o.log : null_stream(); }
// A rank other than 0: no notes, no events but before_step (the tests' fault switches act on every rank).
RunOptions quiet(RunOptions o) {
  RunOptions q;
  q.events.before_step = std::move(o.events.before_step);
  q.plan_only = o.plan_only;
  return q;
}
}  // namespace

// Data-parallel (`mpirun -n N kiln train`, engine/dist/): rank 0 prints and writes the ledger, the
// training-state files, --save, the reports and memory files; the other ranks train silently.
Run::State::State(const RunConfig& config, RunOptions options)
    : c(config), o(group.rank() == 0 ? std::move(options) : quiet(std::move(options))), log(log_of(o)) {
  c.ranks = group.size();
  check_rank_launch(c, group);            // engine/run/run_ranks.h
  c.device = rank_device(c.device, group);  // one GPU per rank
  if (group.rank() != 0) c = silent_rank_config(c);
}

void Run::State::prepare() {
  check_options(c);
  if (!o.plan_only) check_output_folders(c);  // before any data is read: a run must not train and then fail to save
  apply_kernels_option(c.kernels, log);
  check_model_name(c.model);
  if (!c.init.empty()) {
    init_file = read_safetensors(c.init);
    // A file kiln wrote names its model: another architecture is one line, not ~130 key names.
    const auto it = init_file->metadata.find("model");
    KILN_CHECK(it == init_file->metadata.end() || same_model(it->second, c.model), "--init: ", c.init, " holds a ",
               it->second, ", not a ", c.model);
  }
  std::string device_note;
  // A plan for a GPU this machine does not have (--dry-run --device cuda:N): the meta replay needs no
  // device, only its memory (--device-memory); the device's limit is not set (there is no allocator).
  const bool absent_gpu = o.plan_only && c.device != "auto" && Device::parse(c.device).is_cuda() &&
                          !device_present(Device::parse(c.device));
  if (absent_gpu) {
    device = Device::parse(c.device);
    KILN_CHECK(!c.alloc.device_memory.empty(), "--dry-run --device ", c.device, ": no such GPU here (",
               query_devices().why_none, "); give --device-memory (the memory of the card to plan for, e.g. 8G)");
    c.alloc.validate();
    log << "device: planning for " << device.str() << ", which this machine does not have (the meta device "
        << "replays its allocator policy; --device-memory " << c.alloc.device_memory << " is its budget)\n";
  } else {
    device = resolve_device(c.device, &device_note);
    if (!device_note.empty()) log << device_note << "\n";
    apply_device_memory(c.alloc, device, log);
  }
  // The layout, resolved once here for the device: the plan, the step, the ledger and the state all read it.
  const bool explicit_layout = c.channels_last || c.no_channels_last;
  resolve_channels_last(&c, device);
  if (c.channels_last)
    log << "channels-last: training batches are NHWC in memory"
        << (explicit_layout ? "" : " (automatic for --amp bf16 on the CPU; --no-channels-last: NCHW)") << "\n";
  open_data();
  resume = read_resume_state(c, num_classes, log);  // compared with the options before anything is planned
  // --task segment: the model must give (N, K, H, W) at the masks' size (a meta forward, no arithmetic).
  if (segment) check_segment_model(c.model, num_classes, data.train->channels(), data.train->image_size(0));
  plan_memory();
}

void Run::State::open_data() {
  data = open_train_data(c, device);
  DataSource& train = *data.train;
  train_size = train.image_size(c.epochs - 1);
  int64_t max_label = train.max_label();
  if (data.val) max_label = std::max(max_label, data.val->max_label());
  num_classes = c.num_classes > 0 ? c.num_classes : std::max(max_label + 1, data.num_classes);
  KILN_CHECK(max_label < num_classes, "train: label ", max_label, " found in the data but --num-classes is ",
             num_classes);
  segment = c.task == "segment";
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
  card = make_model_card(c.model, num_classes, data, c.image, train.channels(), train_size);
  card.task = c.task;
  card.precision = c.precision();
  // The input shape of each epoch: one shape, or the sizes a progressive schedule feeds epoch by epoch.
  std::string shapes;
  for (int64_t e = 0; e < c.epochs;) {
    const int64_t size = train.image_size(e);
    int64_t end = e;
    while (end + 1 < c.epochs && train.image_size(end + 1) == size) ++end;
    const std::string shape = str_cat(train.channels(), "x", size, "x", size);
    if (e == 0 && end + 1 == c.epochs) shapes = shape;
    else shapes += str_cat(shapes.empty() ? "" : ", ", shape, end > e ? " for epochs " : " for epoch ", e + 1,
                           end > e ? str_cat("-", end + 1) : std::string());
    e = end + 1;
  }
  log << "data: " << train.source() << ", " << train.size() << " samples (" << shapes << ")";
  if (data.val) log << "; val " << data.val->source() << ", " << data.val->size() << " samples";
  for (const std::string& note : data.notes) log << "; " << note;
  log << "\n";
}

// The plan runs before the model is built (it builds a throwaway model and restores the generator), so on
// a small simulated device it never competes with the real model for memory.
void Run::State::plan_memory() {
  DataSource& train = *data.train;
  if (!c.batch_memory.empty())
    batch_memory = std::make_unique<BatchMemoryRun>(c, num_classes, dynamic_cast<BucketedImageSource&>(train),
                                                    dynamic_cast<BucketedImageSource*>(data.val.get()), device, log);
  memory = std::make_unique<TrainMemoryMonitor>(c, num_classes, train, data.val.get(), train_size, device,
                                                data.format == "images", log, resume.epoch(), resume.step_in_epoch(),
                                                o.plan_only);
  plan = memory->plan();
}

void Run::State::build() {
  DataSource& train = *data.train;
  // --batch is per rank (PyTorch DDP's rule); an epoch counts global batches of --batch x ranks.
  const int64_t global_batch = dist::global_batch(c.batch, group.size());
  steps_per_epoch = train.planned_steps_per_epoch() > 0 ? train.planned_steps_per_epoch()
                                                        : train::steps_per_epoch(train.size(), global_batch, c.drop_last);
  // Options that would silently do nothing.
  if (c.optimizer == "adamw" && c.momentum != 0)
    log << "warning: --momentum " << c.momentum << " is ignored by adamw (its betas are 0.9, 0.999)\n";
  if (c.warmup > steps_per_epoch * c.epochs)
    log << "warning: --warmup " << c.warmup << " is longer than the run (" << steps_per_epoch * c.epochs
        << " steps): the LR never reaches --lr " << c.lr << "\n";
  // From here on the device's allocator holds only what the run keeps: its cache starts empty, its peaks
  // count from now (the plan replays the same from a fresh allocator).
  peaks.start(device);
  manual_seed(c.seed);
  const ModelShape shape{num_classes, train.channels(), train_size, memory->recompute_segments()};
  build_model_and_optimizer(setup, c, shape, device, [this](nn::Module& m, optim::Optimizer& o) {
    if (init_file) {
      NamedTensors state;
      for (const NamedArray& a : init_file->tensors) state.emplace_back(a.name, from_host_array(a.array, Device::cpu()));
      init_file.reset();
      m.load_state_dict(state, true);
      log << "init: loaded " << c.init << "\n";
    }
    start = restore_resume_state(resume, c, m, o, Device::cpu(), steps_per_epoch, log);
  });
  step = start.step;
}

void Run::State::join_ranks() {
  const int ranks = group.size();
  if (ranks <= 1) return make_class_weights(setup, c, num_classes, device);
  if (batch_memory) {  // every rank planned its batches from its own meta runs: they must agree
    int64_t mine = 0, place = 0;
    for (const BucketMemory& b : batch_memory->buckets()) mine += ++place * b.batch;
    KILN_CHECK(group.sum(mine) == mine * ranks, "train: --batch-memory: the ranks planned different batches "
               "(rank ", group.rank(), "'s: a different device budget or build?)");
  }
  group.set_timeout(c.dist_timeout);
  make_data_parallel(setup, c, &group);
  data_parallel->set_steps_done(step);
  data_parallel->broadcast_state(0);  // rank 0's weights and buffers (fresh, --init or --resume) everywhere
  log << "data-parallel: " << ranks << " ranks (" << group.backend() << "), "
      << (batch_memory ? std::string("batches of each size bucket per rank by --batch-memory (above)")
                       : str_cat("batch ", c.batch, " per rank, ", dist::global_batch(c.batch, ranks), " per step"))
      << "; gradients all-reduced in " << data_parallel->buckets().size() << " buckets of up to " << c.bucket_mb
      << " MiB" << (data_parallel->overlaps() ? ", during backward" : ", after backward") << "\n";
  make_class_weights(setup, c, num_classes, device);
  if (c.sync_bn) {
    data_parallel->sync_batch_norm();
    log << "data-parallel: --sync-bn: BatchNorm statistics summed over the " << ranks << " ranks\n";
    return;
  }
  for (const auto& [name, b] : model->named_buffers())
    if (name.find("running_mean") != std::string::npos) {
      log << "warning: data-parallel: " << c.model << " has BatchNorm; its statistics are each rank's own "
          << "(use --sync-bn for the global batch's), so the result depends on the number of ranks\n";
      break;
    }
}

void Run::State::start_ledger() {
  log << "model: " << c.model << ", " << model->num_parameters() << " parameters, " << num_classes << " classes"
      << (segment ? " (task segment)" : "") << "; device " << device.str() << ", " << cpu::num_threads()
      << " threads; " << steps_per_epoch << " steps/epoch\n";
  make_loss_scaler(setup, c, device);
  if (amp->scaling() && start.saved.has_amp) {
    amp->load_state(start.saved.amp_scale, start.saved.amp_growth_tracker, start.saved.amp_skipped_steps);
  } else if (amp->scaling() && !c.resume.empty()) {
    log << "amp: " << c.resume << " has no loss scaler state (saved without --amp f16); starting from the initial "
        << "scale\n";
  }
  if (amp->enabled()) log << amp->start_text() << "\n";
  // The run ledger: a start record now (a killed run is still listed), curve points, epochs, the end.
  ledger = std::make_unique<train::RunLedger>(c.out.empty() ? "" : (fs::path(c.out) / "runs.jsonl").string());
  curve = std::make_unique<train::CurveRecorder>(c.curve_every, device, amp->scaling());
  ledger->start({{"command", "train"}, {"config", c.to_json()}, {"device", device.str()}, {"ranks", group.size()},
                 {"data", data.ledger}, {"image_size", train_size}, {"model_parameters", model->num_parameters()},
                 {"start_epoch", start.epoch}, {"steps_per_epoch", steps_per_epoch}, {"memory", memory->to_json()}});
  ledger_started = true;
  first_step = std::make_unique<FirstStepRecorder>(c.alloc, device);
  state_path = c.out.empty() ? "" : (fs::path(c.out) / "checkpoint.safetensors").string();
  for (const std::string& target : {state_path, c.save})
    if (!target.empty())
      for (const std::string& t : remove_stale_temporaries(target))
        log << "removed " << t << " (the temporary of a run that was killed while writing it)\n";
  train_bad = data.train->bad_count();
}

train::FitOptions Run::State::fit_options() {
  train::FitOptions fo = run_fit_options(c, setup);
  fo.start_epoch = start.epoch;
  fo.start_step = start.step;
  fo.start_step_in_epoch = start.step_in_epoch;
  fo.start_sums = start.sums;
  if (c.detect_anomaly) log << "detect-anomaly: every op's output and gradient is checked for inf/NaN (slow)\n";
  fo.evaluate = [this, run_eval = fo.evaluate](nn::Module& m, DataSource& v, int64_t epoch) {
    where_now = str_cat("validation after epoch ", epoch + 1);
    phase_now = validation_phase_name(c.batch, v.image_size(epoch));
    return run_eval ? run_eval(m, v, epoch) : evaluate_source(m, v, c.batch, epoch, class_weights);
  };
  fo.callbacks.on_epoch_begin = [this](int64_t epoch, int64_t per_epoch) {
    peaks.restart();
    curve->epoch_begin();
    if (!first_step->done()) first_step->begin();
    if (o.events.on_epoch_begin) o.events.on_epoch_begin(epoch + 1, c.epochs, per_epoch);
  };
  fo.callbacks.before_step = [this](const train::FitStep& fs) { before_step(fs); };
  fo.callbacks.on_step_end = [this](const train::FitStep& fs) { on_step_end(fs); };
  fo.callbacks.on_memory_growth = [this](const train::MemoryGrowth& g) { log << g.message() << "\n"; };
  fo.callbacks.on_epoch_end = [this](EpochStats& es) { on_epoch_end(es); };
  return fo;
}

void Run::State::before_step(const train::FitStep& fs) {
  const bool short_last = data.train->planned_steps_per_epoch() == 0 && fs.step_in_epoch + 1 == fs.steps_per_epoch &&
                          fs.rows < c.batch;
  phase_now = step_phase_name(fs.global_step == start.step, short_last, fs.rows, fs.size);
  where_now = str_cat("epoch ", fs.epoch + 1, ", step ", fs.step_in_epoch + 1, " (batch ", fs.rows, " x ", fs.size,
                      " px)");
  if (o.events.before_step) o.events.before_step(fs);
  report_bad(*data.train);
  memory->before_step();
  if (batch_memory) peaks.restart();  // --batch-memory measures each step's peak
}

// The training state after `step` optimizer steps: `epoch` epochs done plus `step_in_epoch` steps of the next.
void Run::State::save_state(int64_t epoch, int64_t step_in_epoch, const train::EpochSums& sums) {
  CheckpointState st{epoch, step, global_rng()};
  st.step_in_epoch = step_in_epoch;
  st.epoch_loss_sum = sums.loss_sum;
  st.epoch_correct = sums.correct;
  st.epoch_seen = sums.seen;
  st.epoch_undefined_batches = sums.undefined_batches;
  st.epoch_metric_total = sums.metric_total;
  if (amp->enabled()) st.amp_dtype = dtype_name(amp->dtype());
  if (amp->scaling()) {
    st.has_amp = true;
    st.amp_scale = amp->scaler().current_scale();
    st.amp_growth_tracker = amp->scaler().growth_tracker();
    st.amp_skipped_steps = amp->skipped_steps();
  }
  HostScratchScope scratch;  // the file's host copies stay out of the device's allocator (and the plan)
  save_checkpoint(state_path, *model, *opt, st, c.model, num_classes, c.to_json(), &card);
}

void Run::State::on_step_end(const train::FitStep& fs) {
  step = fs.global_step + 1;
  if (batch_memory) batch_memory->after_step(fs);
  if (auto point = curve->observe(fs)) ledger->step(*point);
  // Every checkpoint_steps; one due at an epoch's last step is written at the epoch's end.
  if (!state_path.empty() && c.checkpoint_steps > 0 && step % c.checkpoint_steps == 0 &&
      fs.step_in_epoch + 1 < fs.steps_per_epoch)
    save_state(fs.epoch, fs.step_in_epoch + 1, {fs.loss_sum, fs.correct, fs.seen, fs.undefined_batches, fs.metric_total});
  memory->after_step(log, o.events.on_first_step_memory);
  if (o.events.on_step_end) {
    std::string status = amp->progress_text() + (batch_memory ? batch_memory->progress_text() : "");
    if (segment && fs.metric_total > 0) {  // the epoch's running pixel accuracy
      status += "  pixel acc " + percent_text(fs.correct, fs.metric_total);
    }
    o.events.on_step_end({&fs, status, !first_step->done()});
  }
  if (!first_step->done()) first_step->end(log);
}

void Run::State::on_epoch_end(EpochStats& es) {
  report_bad(*data.train);
  // Data-parallel: an image source decodes each rank's shard, so each rank met its own bad samples.
  train_bad = group.size() > 1 ? group.sum(data.train->bad_count()) : data.train->bad_count();
  es.peak_memory = batch_memory ? batch_memory->take_epoch_peak() : peak_memory_bytes(device);
  es.run_peak_allocated = peaks.allocated();
  es.run_peak_reserved = peaks.reserved();
  if (o.events.on_epoch_end) o.events.on_epoch_end(es);
  epoch_notes(es);
  const bool last = es.epoch == c.epochs;
  if (!state_path.empty() && (last || (c.checkpoint_every > 0 && es.epoch % c.checkpoint_every == 0) ||
                              (c.checkpoint_steps > 0 && step % c.checkpoint_steps == 0)))
    save_state(es.epoch, 0, {});
  result.epochs.push_back(es);
  ledger->epoch({{"steps", step}, {"stats", epoch_json(es)}});
  ledger_written();
}

// The notes after an epoch's line: amp, bad samples, memory measured against the plan, data-parallel times.
void Run::State::epoch_notes(const EpochStats& es) {
  if (amp->scaling()) log << "amp: loss scale " << es.loss_scale << ", " << es.skipped_steps << " skipped steps\n";
  if (data.val) report_bad_samples(*data.val, log);
  memory->after_epoch(es.epoch, log);
  if (data_parallel && data_parallel->overlaps())
    log << "data-parallel: " << data_parallel->started_during_backward() << " of " << data_parallel->buckets().size()
        << " buckets started their all-reduce during the last backward\n";
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
  const int64_t val_bad = data.val ? data.val->bad_count() : 0;
  if (train_bad > 0 || val_bad > 0)
    log << "data: " << train_bad + val_bad << " bad samples skipped so far ("
        << (group.size() > 1 ? "summed over the ranks' shards; " : "") << "listed above)\n";
}

void Run::State::record_failure(const std::string& error) {
  nlohmann::json failed = {{"command", "train"}, {"config", c.to_json()}, {"steps", step},
                           {"wall_s", seconds_since(t_start)}, {"epochs", nlohmann::json::array()}};
  for (const EpochStats& es : result.epochs) failed["epochs"].push_back(epoch_json(es));
  try {
    ledger->finish(failed, "failed", error);
    ledger_written();
  } catch (const std::exception& le) {
    log << "runs.jsonl: could not record the failure: " << le.what() << "\n";
  }
}

// --save, and the ledger's end record: the whole run.
void Run::State::finish() {
  result.steps = step;
  if (!c.save.empty()) {
    HostScratchScope scratch;
    save_weights(c.save, *model, card);
    log << "saved weights to " << c.save << "\n";
  }
  result.wall_s = seconds_since(t_start);
  nlohmann::json j;
  j["time"] = now_iso8601();
  j["command"] = "train";
  j["config"] = c.to_json();
  j["config"]["num_classes"] = num_classes;
  j["device"] = device.str();
  j["threads"] = cpu::num_threads();
  j["cpu_isa"] = cpu::cpu_isa_name(cpu::cpu_isa());  // the CPU kernels' instruction set (kernels/cpu/cpu_isa.h)
  j["cpu_model"] = cpu::cpu_model_name();
  // The bf16 paths the CPU kernels take (kernels/cpu/bf16_path.h), whatever the run's precision.
  j["cpu_bf16"] = {{"conv", cpu::bf16_path_name(cpu::bf16_path_wanted())},
                   {"matmul", cpu::bf16_path_name(cpu::bf16_path_wanted())},
                   {"onednn", cpu::onednn_version()}};
  j["ranks"] = group.size();
  j["data"] = data.ledger;
  j["data"]["bad_samples"] = train_bad + (data.val ? data.val->bad_count() : 0);
  j["model_parameters"] = model->num_parameters();
  j["schedule"] = LrSchedule::parse(c.schedule, c.warmup).str();
  j["start_epoch"] = start.epoch;
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
    const double baseline = train::all_background_metrics(*fin->val_segment).mean_iou;
    j["final_val_miou"] = number_or_null(fin->val_segment->mean_iou);
    j["final_val_mean_dice"] = number_or_null(fin->val_segment->mean_dice);
    j["val_baseline_miou"] = number_or_null(baseline);
    log << "segment: val mIoU " << percent_text(fin->val_segment->mean_iou) << " after epoch " << fin->epoch
        << "; predicting background everywhere gives " << percent_text(baseline) << "\n";
  }
  j["images_per_s"] = result.epochs.empty() ? 0.0 : ips / (double)result.epochs.size();
  j["peak_memory_bytes"] = peak >= 0 ? nlohmann::json(peak) : nlohmann::json();
  // The run's two memory figures, measured over the whole run, and the plan's for the same (run_peaks.h).
  j["peak_allocated"] = peaks.allocated();
  j["peak_reserved"] = peaks.reserved();
  j["plan"] = plan.to_json();
  j["wall_s"] = result.wall_s;
  j["memory"] = memory->to_json();
  j["amp"] = amp->ledger_json();
  j["image_size"] = train_size;
  if (batch_memory) j["batch_memory"] = batch_memory->to_json();
  if (data_parallel) {  // rank 0's view, over the whole run
    const train::DataParallel::CommTimes t = data_parallel->comm_times();
    j["data_parallel"] = {{"steps", t.steps}, {"comm_wait_s", t.wait_s}, {"all_reduce_s", t.all_reduce_s},
                          {"comm_wait_ms_per_step", 1e3 * t.mean_wait_s()},
                          {"all_reduce_ms_per_step", 1e3 * t.mean_all_reduce_s()}};
  }
  log << measured_vs_planned_line(peaks.allocated(), peaks.reserved(), plan) << "\n" << outside_memory_line(device, peaks.reserved(), memory->loader_bytes()) << "\n";
  j["peak_rss"] = peak_rss_bytes();
  ledger->finish(j, "ok");
  j["record"] = "end";
  j["run"] = ledger->run_id();
  j["status"] = "ok";
  ledger_written();
  result.ledger_line = j;
}

Run::Run(const RunConfig& config, RunOptions options) : s_(std::make_unique<State>(config, std::move(options))) {
  try {
    s_->prepare();
  } catch (const std::exception& e) {
    if (s_->group.rank() == 0 && !s_->o.plan_only) record_refused_run(s_->c, e.what(), s_->o.events.on_ledger);
    throw;
  }
}

Run::~Run() = default;

const RunConfig& Run::config() const { return s_->c; }
const RunPlan& Run::plan() const { return s_->plan; }
const std::string& Run::plan_refusal() const { return s_->memory->stop_message(); }

RunResult Run::train() {
  State& s = *s_;
  KILN_CHECK(!s.trained, "Run::train: this run has already trained (make a new Run to train again)");
  KILN_CHECK(!s.o.plan_only, "Run::train: this run was made to plan only (RunOptions::plan_only)");
  s.trained = true;
  try {
    s.build();
    s.join_ranks();
    s.start_ledger();
  } catch (const std::exception& e) {
    if (s.group.rank() == 0) record_refused_run(s.c, e.what(), s.o.events.on_ledger);
    throw;
  }
  train::FitResult fr;
  try {
    // Validation runs on rank 0 alone (it changes no state; the other ranks would only repeat it).
    fr = train::fit(*s.model, *s.opt, s.amp->scaler(), *s.data.train,
                    s.group.rank() == 0 ? s.data.val.get() : nullptr, s.fit_options());
  } catch (const OutOfMemory& e) {
    // The same remedies as the stop before the first step, from meta runs, not proportional guesses.
    OutOfMemory full(s.memory->out_of_memory(e.what(), s.where_now, s.phase_now, [&s] {
      s.opt.reset();
      s.model.reset();
    }));
    s.record_failure(full.what());
    throw full;
  } catch (const std::exception& e) {
    s.record_failure(e.what());
    throw;
  }
  s.step = fr.steps;
  s.finish();
  return s.result;
}

}  // namespace kiln
