// Prediction vs measurement for `kiln train` (see mem_train.h).
#include "engine/run/run_memory.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "engine/run/mem_remedies.h"
#include "engine/run/outside_memory.h"
#include "engine/run/plan_run.h"
#include "engine/dist/process_group.h"
#include "engine/memory/alloc_config.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/device_present.h"
#include "engine/train/memory_peak.h"

namespace kiln {

namespace {
std::string bytes2(int64_t b) { return format_bytes((double)b); }  // "64.00 MiB", as the allocator's account
std::string human(int64_t b) {
  char buf[32];
  return format_bytes(b, buf, sizeof buf);
}
nlohmann::json tags_json(const TagBytes& b) {
  nlohmann::json j;
  for (int t = 0; t < kNumMemoryTags; ++t) j[tag_name((MemoryTag)t)] = b[t];
  return j;
}
}  // namespace

TrainMemoryMonitor::TrainMemoryMonitor(const RunConfig& c, int64_t num_classes, const DataSource& train,
                                       const DataSource* val, int64_t model_size, Device device,
                                       bool image_size_applies, std::ostream& log, int64_t start_epoch,
                                       int64_t start_step_in_epoch, bool plan_only)
    : config_(c), device_(device) {
  const int64_t channels = train.channels(), height = train.image_size(0);
  const std::vector<int64_t> sample = train.sample_shape(0);
  const int64_t width = sample.size() == 3 ? sample[2] : height;
  MemConfig mc;
  mc.train = c;
  mc.train.num_classes = num_classes;
  mc.train.device = device.str();
  mc.image_size = height;
  mc.in_channels = channels;
  mc.num_classes = num_classes;
  mc.ranks = (int)c.ranks;  // one rank's step and its buckets
  // The whole run's plan: its own training replayed on the meta device (engine/run/plan_run.h), with the
  // device's budget as the replay's capacity. Every other figure below (recompute auto, the remedies) is a
  // plan of the run with one thing changed.
  plan_in_.config = &config_;
  plan_in_.train = &train;
  plan_in_.val = val;
  plan_in_.model = {num_classes, channels, model_size, 0};
  plan_in_.device = device;
  // A GPU this machine does not have (a --dry-run plan for it): its budget is --device-memory.
  plan_in_.budget = !device_present(device) && !c.alloc.device_memory.empty() ? (int64_t)parse_bytes(c.alloc.device_memory)
                                                                              : device_budget(device);
  plan_in_.start_epoch = start_epoch;
  plan_in_.start_step_in_epoch = start_step_in_epoch;
  int ck = parse_recompute_option(c.recompute);
  if (!c.batch_memory.empty()) {  // per size bucket, by engine/run/batch_memory.h (which refuses auto)
    per_bucket_ = true;
  } else if (ck < 0) {
    KILN_CHECK(height == width, "--checkpoint auto needs square images, got ", height, "x", width);
    ck = choose_recompute(mc, plan_in_.budget, nullptr, plan_peak(-1));
    log << "checkpoint auto: " << ck << " segments (budget " << human(plan_in_.budget) << ")\n";
  }
  segments_ = std::max(ck, 0);
  mc.recompute = segments_;
  plan_in_.model.recompute_segments = segments_;
  plan_ = plan_run(plan_in_);
  if (image_size_applies) {  // an image folder's loader decodes into host buffers of its own
    int64_t per_sample = 0;
    for (int64_t e = 0; e < c.epochs; ++e) {
      int64_t n = 4;  // f32
      for (int64_t d : train.sample_shape(e)) n *= d;
      per_sample = std::max(per_sample, n);
    }
    loader_bytes_ = (c.image.prefetch + 2) * std::max<int64_t>(c.batch, 1) * per_sample;
  }
  plan_.notes.push_back(outside_memory_note(loader_bytes_));
  log << plan_.text();
  if (height == width && !per_bucket_) {  // the step's own accounts: per tag, per layer (the memory report)
    mc.detail = !c.memory_report.empty();
    mem_config_ = mc;
    mem_config_.detail = false;
    image_size_applies_ = image_size_applies;
    prediction_ = predict_memory(mc);
    have_prediction_ = true;
  }
  // Stop before the real model is built when the run cannot fit (--force runs anyway).
  if (plan_.fits()) return;
  const std::string what =
      c.alloc.device_memory.empty() ? "the device's memory" : "--device-memory " + c.alloc.device_memory;
  if (c.force && !plan_only) {
    log << "memory: the plan does not fit the budget of " << human(plan_.budget) << " (" << what
        << "); running anyway (--force)\n";
    return;
  }
  std::vector<MemRemedy> remedies;
  if (have_prediction_)
    remedies = find_memory_remedies(mem_config_, plan_.budget, image_size_applies, &prediction_, plan_peak(-1));
  stop_message_ = format_plan_stop(plan_, what, remedies, unlimited_plan());
  if (!plan_only) throw Error(stop_message_);
}

PeakOf TrainMemoryMonitor::plan_peak(int64_t budget) const {
  return [this, budget](const MemConfig& k) -> int64_t {
    RunConfig rc = k.train;
    rc.recompute = std::to_string(k.recompute);
    PlanInputs p = plan_in_;
    if (budget >= 0) p.budget = budget;
    p.config = &rc;
    p.model.recompute_segments = k.recompute;
    if (k.image_size != config_image_size()) p.image_size = p.model.image_size = k.image_size;
    try {
      const RunPlan r = plan_run(p);
      return r.fits() ? r.peak_reserved : p.budget + 1;  // past the budget: it runs out in the replay
    } catch (const Error&) {  // no such run (a batch too small for batch norm, a size the model refuses)
      return INT64_MAX;
    }
  };
}

int64_t TrainMemoryMonitor::config_image_size() const { return plan_in_.train->image_size(0); }

RunPlan TrainMemoryMonitor::unlimited_plan() const {
  PlanInputs p = plan_in_;
  p.budget = 0;  // no capacity: what the run would take
  return plan_run(p);
}

void TrainMemoryMonitor::apply(nn::Module& model) const {
  if (segments_ > 0) model.set_recompute_segments(segments_);
}

void TrainMemoryMonitor::before_step() {
  if (steps_seen_ == 0 && !config_.memory_report.empty())
    if (CachingAllocator* a = caching_allocator_for(device_)) a->enable_trace(size_t(1) << 20);
}

MemMeasured TrainMemoryMonitor::measure(const std::string& when) const {
  MemMeasured m;
  CachingAllocator* a = caching_allocator_for(device_);
  if (!a) return m;
  const MemoryStats s = a->stats();
  m.present = true;
  m.when = when;
  m.peak_allocated = s.total.allocated.peak;
  m.peak_reserved = s.total.reserved.peak;
  for (int t = 0; t < kNumMemoryTags; ++t) m.tag_peak[t] = s.tag_allocated[t].peak;
  return m;
}

void TrainMemoryMonitor::compare(const MemMeasured& m, const StepPeak& p, int64_t predicted_reserved,
                                 std::ostream& log) {
  char line[200];
  std::snprintf(line, sizeof line, "memory %s: peak allocated measured %s, predicted %s (%+.2f%%); reserved %s vs %s\n",
                m.when.c_str(), human(m.peak_allocated).c_str(), human(p.allocated).c_str(),
                m.peak_allocated ? 100.0 * (double)(p.allocated - m.peak_allocated) / (double)m.peak_allocated : 0.0,
                human(m.peak_reserved).c_str(), human(predicted_reserved).c_str());
  log << line << "  per tag (measured / predicted):";
  for (int t = 0; t < kNumMemoryTags; ++t)
    if (m.tag_peak[t] || p.tag_peak[t])
      log << " " << tag_name((MemoryTag)t) << " " << human(m.tag_peak[t]) << " / " << human(p.tag_peak[t]) << ";";
  log << "\n";
}

void TrainMemoryMonitor::after_step(std::ostream& log, const FirstStepMemory& on_first_step) {
  ++steps_seen_;
  last_epoch_ = measure("epoch");
  if (steps_seen_ != 1 || !last_epoch_.present) return;
  first_ = measure("first step");
  if (CachingAllocator* a = caching_allocator_for(device_); a && !config_.memory_report.empty()) {
    first_.trace = a->chrome_trace();
    a->enable_trace(0);
  }
  if (!have_prediction_) return;
  compare(first_, prediction_.first, prediction_.first.reserved, log);
  if (on_first_step) on_first_step(prediction_, first_);
}

void TrainMemoryMonitor::after_epoch(int64_t epoch, std::ostream& log) {
  if (!last_epoch_.present || per_bucket_) return;  // --batch-memory: peaks are reset every step
  last_epoch_.when = "epoch " + std::to_string(epoch);
  nlohmann::json e = {{"epoch", epoch},
                      {"measured_peak_allocated", last_epoch_.peak_allocated},
                      {"measured_peak_reserved", last_epoch_.peak_reserved},
                      {"measured_tag_peak", tags_json(last_epoch_.tag_peak)}};
  epochs_.push_back(e);
  if (!have_prediction_) return;
  const StepPeak& p = prediction_.first.allocated >= prediction_.steady.allocated ? prediction_.first
                                                                                   : prediction_.steady;
  compare(last_epoch_, p, prediction_.peak_reserved, log);
}

std::string TrainMemoryMonitor::out_of_memory(const std::string& account, const std::string& where,
                                              const std::string& phase, const std::function<void()>& release) const {
  CachingAllocator* a = caching_allocator_for(device_);
  if (!a) {
    if (release) release();
    return account;
  }
  const MemoryStats s = a->stats();  // reserved as at the failure: unwinding frees into the cache
  const int64_t capacity = (int64_t)s.capacity, held = s.total.reserved.current;
  if (release) release();
  a->empty_cache();
  // The allocator's account up to its proportional suggestions.
  std::string head = account.substr(0, account.find("  what to try:"));
  while (!head.empty() && head.back() == '\n') head.pop_back();
  std::ostringstream o;
  o << head << "\n  at " << (where.empty() ? "set-up" : where);
  const PhasePlan* p = plan_.phase(phase);
  const int64_t planned = p ? p->peak_reserved : plan_.peak_reserved;
  if (plan_.planned)
    o << "; the plan for this phase (" << (p ? p->name : "the whole run") << "): peak allocated "
      << bytes2(p ? p->peak_allocated : plan_.peak_allocated) << ", reserved " << bytes2(planned) << "; kiln held "
      << bytes2(held) << " reserved when it failed (" << (held >= planned ? "+" : "-")
      << bytes2(held >= planned ? held - planned : planned - held) << ")\n";
  int64_t budget = capacity;
  if (!plan_.planned) {
    o << "  (no plan was made for this run: " << plan_.why_not << ")\n";
  } else if (!plan_.fits()) {
    o << "  the plan did not fit the budget of " << bytes2(plan_.budget) << " (this run was started with --force): "
      << (plan_.oom_where.empty() ? "" : "it predicted running out at " + plan_.oom_where) << "\n";
  } else if (held <= planned) {
    o << "  kiln held no more than its plan: the memory went elsewhere (another process, or a limit lowered since "
      << "the plan: " << bytes2(capacity) << " now, " << bytes2(plan_.budget) << " when planned)\n";
    budget = std::min(capacity, held);
  } else {
    o << "  kiln held " << bytes2(held - planned) << " more than its plan for this phase: the plan missed an "
      << "allocation (a bug of kiln's plan; please report this message)\n";
  }
  if (!have_prediction_) return o.str();
  o << "  remedies for a budget of " << bytes2(budget) << " (each alone: the run's plan with that one change):";
  try {
    const std::vector<MemRemedy> remedies =
        find_memory_remedies(mem_config_, budget, image_size_applies_, &prediction_, plan_peak(budget));
    o << remedies_text(remedies, budget);
  } catch (const Error& e) {
    o << "\n  (none: the plans failed: " << e.what() << ")";
  }
  return o.str();
}

nlohmann::json TrainMemoryMonitor::to_json() const {
  nlohmann::json j;
  j["checkpoint_segments"] = segments_;
  j["predicted"] = have_prediction_ ? prediction_.to_json() : nlohmann::json();
  if (first_.present)
    j["measured_first_step"] = {{"peak_allocated", first_.peak_allocated},
                                {"peak_reserved", first_.peak_reserved},
                                {"tag_peak", tags_json(first_.tag_peak)}};
  j["measured_epochs"] = epochs_;
  return j;
}

}  // namespace kiln
