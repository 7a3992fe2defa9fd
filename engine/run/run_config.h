// The description of one training run (kiln::Run, engine/run/run.h): typed options, one per `kiln train`
// flag of the same name, the learning-rate schedule it names, and its JSON form, which the run ledger and
// training-state files keep (a resumed run is compared against it, so its keys do not change).
// The schedule is a pure function of the optimizer step, so a checkpoint needs only the step
// count to resume it exactly. Must not touch models, data or files.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/run/alloc_options.h"
#include "data/image_options.h"
#include "engine/optim/lr_schedule.h"

namespace kiln {

// --schedule "none" | "cosine" | "step:EVERY:GAMMA" (EVERY in epochs), plus --warmup: a linear
// warm-up of `warmup` optimizer steps from lr/warmup to lr (applied on top of the schedule). The
// flags only: the arithmetic is engine/optim/lr_schedule.h's (build()).
struct LrSchedule {
  enum class Kind { none, cosine, step } kind = Kind::none;
  int64_t step_every_epochs = 0;
  double gamma = 1.0;
  int64_t warmup_steps = 0;

  // Throws kiln::Error naming the text on anything else.
  static LrSchedule parse(const std::string& text, int64_t warmup_steps);
  std::string str() const;
  // The schedule as a factor of --lr at each optimizer step (0-based) of a run of `total_steps`,
  // `steps_per_epoch` steps an epoch: CosineLR over the run, StepLR every EVERY epochs, RampLR.
  optim::LRSchedulePtr build(int64_t steps_per_epoch, int64_t total_steps) const;
};

struct RunConfig {
  std::string model;
  std::string task = "classify";  // classify | segment (engine/train/segment_task.h)
  bool ignore_background = false; // segment: class 0 left out of mean IoU and mean Dice
  std::string loss = "ce";        // segment: ce | dice | ce+dice (engine/train/segment_task.h)
  std::string data, val;
  int64_t num_classes = 0;  // 0: from the data (max label + 1)
  int64_t epochs = 1;
  int64_t batch = 64;
  // --batch-memory BYTES (engine/run/batch_memory.h): image batches sized per size bucket so that each
  // step's predicted peak allocated bytes fit; "" = fixed --batch.
  std::string batch_memory;
  bool drop_last = false;  // drop each epoch's last batch when it is short
  int64_t accum = 1;
  std::string optimizer = "sgd";  // sgd | adamw
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = -1.0;  // < 0: the optimizer's PyTorch default (sgd 0, adamw 0.01)
  std::string schedule = "none";
  int64_t warmup = 0;
  double clip = 0.0;  // > 0: clip the global gradient norm to this
  std::vector<double> class_weights;
  uint64_t seed = 0;
  int threads = 0;  // 0: kiln's default
  std::string device = "auto";
  std::string init, save, resume;
  int64_t checkpoint_every = 1;  // epochs between training-state files (0: only at the end)
  int64_t checkpoint_steps = 0;  // optimizer steps between training-state files (0: none mid-epoch)
  bool resume_override = false;  // --resume-override: flags that differ from the saved state win
  std::string out = "runs";
  int64_t limit = -1;  // >= 0: use only the first N training samples
  std::string recompute = "0";  // recompute segments: "N" or "auto" (engine/run/run_memory.h)
  std::string memory_report;     // HTML memory report path (empty: none)
  std::string report;            // HTML training report path, rewritten after each epoch (empty: none)
  int64_t curve_every = 50;      // optimizer steps between curve points in OUT/runs.jsonl
  bool force = false;            // train even when the predicted peak exceeds the memory budget
  ImageOptions image;  // image folders / CSV lists: --image-size, --augment, --normalize, ...
  AllocOptions alloc;  // --device-memory, --memory-snapshot, --trace, --alloc-trace
  // Mixed precision (engine/run/amp_training.h), `--amp [f16|bf16]`: amp turns autocast on (conv2d, linear,
  // matmul in amp_dtype with f32 accumulation; batch norm statistics, softmax, losses and reductions in f32;
  // master weights, gradients and optimizer state f32). amp_dtype f16 (`--amp`, `--amp f16`) adds dynamic
  // loss scaling (amp_init_scale, amp_growth_interval); bf16 (`--amp bf16`) has f32's exponent range and runs
  // without a loss scaler (the scaler options are then unused). amp_dtype is ignored while amp is false.
  bool amp = false;
  DType amp_dtype = DType::f16;  // f16 or bf16
  double amp_init_scale = 65536.0;
  int64_t amp_growth_interval = 2000;
  // Non-finite values (engine/train/fit.h): check every op of every step (off: only a failing step
  // is re-run under the check), and the --amp loss scaler's consecutive skips that end the run.
  bool detect_anomaly = false;
  int64_t max_skipped_steps = 50;  // 0: no limit
  std::string kernels = "vendor";  // GEMM/convolution kernels on CUDA: vendor | kiln (kernel_option.h)
  // The layout of the training batches, three states: `channels_last` (--channels-last) on; `no_channels_last`
  // (--no-channels-last) NCHW; neither: automatic, resolve_channels_last() below decides once the device is known:
  // on for --amp bf16 on the CPU (kiln's bf16 CPU convolutions run fastest on NHWC: docs/cpu-bf16.md, "Channels-last
  // by default"), off otherwise (f32 and --amp f16 on the CPU measured no gain; CUDA keeps its opt-in). Two bools,
  // not an enum or a std::optional<bool>: library code that sets `channels_last = true` or reads
  // `if (c.channels_last)` keeps compiling and meaning "on" (an optional<bool> would read as "set" in that `if`).
  // After resolution channels_last is the layout the run uses everywhere (the step, the memory plan, the log, the
  // ledger's and training state's "channels_last" key, still a bool) and no_channels_last its negation.
  bool channels_last = false;
  bool no_channels_last = false;
  // Data-parallel (`mpirun -n N kiln train`): gradient bucket size in MiB (the first bucket: at most 1 MiB).
  double bucket_mb = 25;
  // Data-parallel: seconds a collective may wait for the other ranks before this rank names the stall and
  // ends the job (<= 0: for ever). Not in to_json (an operational limit, like --threads).
  double dist_timeout = 300;
  // --sync-bn: batch norm statistics of the global batch (summed over the ranks; one process: plain BN).
  bool sync_bn = false;
  // Not a flag: the ranks of the run (run_training sets it from the process group). --batch is per rank,
  // so a saved state's global batch is batch x ranks (engine/run/resume_check.h).
  int64_t ranks = 1;

  // True when the run scales its loss (--amp f16); bf16 and f32 runs have no loss scaler.
  bool amp_loss_scaling() const { return amp && amp_dtype == DType::f16; }
  // "f32", "amp f16" or "amp bf16": the run's precision as the progress log, ledger and model card name it.
  std::string precision() const { return amp ? std::string("amp ") + dtype_name(amp_dtype) : std::string("f32"); }
  double effective_weight_decay() const {
    return weight_decay >= 0 ? weight_decay : (optimizer == "adamw" ? 0.01 : 0.0);
  }
  nlohmann::json to_json() const;
};

// --checkpoint-every: "N" or "Nep" (epochs, N >= 0; 0: only at the end), "Nsteps" (optimizer
// steps, N >= 1), or both joined by a comma ("2ep,500steps"). Sets c->checkpoint_every and
// c->checkpoint_steps; throws kiln::Error naming the text on anything else.
void parse_checkpoint_every(const std::string& text, RunConfig* c);

// The automatic layout rule (neither --channels-last nor --no-channels-last): channels-last when the run is
// --amp bf16 on a CPU device. A pure function of the options and the device, so a resumed run on the same device
// resolves the same way (engine/run/resume_check.h does not compare the layout).
bool auto_channels_last(const RunConfig& c, const Device& device);

// Resolves the layout for `device`: an explicit flag wins, else auto_channels_last(). Afterwards
// c->channels_last is the layout and c->no_channels_last its negation, so resolving again changes nothing.
// Both flags set: a UsageError naming them.
void resolve_channels_last(RunConfig* c, const Device& device);

// "1,2.5,0.3" -> {1, 2.5, 0.3}; throws kiln::Error naming the bad item.
std::vector<double> parse_double_list(const std::string& text, const char* what);

// --amp's value: "" (the flag alone) or "f16" -> f16, "bf16" -> bf16; throws kiln::UsageError naming the option
// otherwise.
DType parse_amp_dtype(const std::string& text);

// --recompute "0", "4" or "auto" -> segments (-1 for auto); throws kiln::UsageError naming the option otherwise.
int parse_recompute_option(const std::string& text);

}  // namespace kiln
