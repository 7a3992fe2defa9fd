// The memory plan of a run by replay (see plan_run.h).
#include "engine/run/plan_run.h"

#include <algorithm>
#include <optional>

#include "data/meta_source.h"
#include "engine/core/generator.h"
#include "engine/core/meta_target.h"
#include "engine/core/error.h"
#include "engine/dist/shard.h"
#include "engine/train/evaluate.h"
#include "engine/train/meta_session.h"

namespace kiln {

namespace {

// The phases of the replay as they come: one entry per phase kind and shape, its peaks the largest seen.
class PhaseTracker {
 public:
  PhaseTracker(train::MetaSession& session, RunPlan& plan) : session_(session), plan_(plan) {}

  // Starts (or continues) the phase `name`; peaks of the phase before are folded into the plan.
  void enter(const std::string& name, int64_t batch, int64_t size) {
    if (current_ == name) return;
    leave();
    current_ = name;
    batch_ = batch;
    size_ = size;
    session_.begin_step();
  }
  // Ends the phase now running: its peaks go into its entry (and the whole run's).
  void leave() {
    if (current_.empty()) return;
    const StepPeak p = session_.end_step();
    auto it = std::find_if(plan_.phases.begin(), plan_.phases.end(), [&](const PhasePlan& q) { return q.name == current_; });
    if (it == plan_.phases.end()) {
      plan_.phases.push_back({current_, batch_, size_, p.allocated, p.reserved});
    } else {
      it->peak_allocated = std::max(it->peak_allocated, p.allocated);
      it->peak_reserved = std::max(it->peak_reserved, p.reserved);
    }
    plan_.peak_allocated = std::max(plan_.peak_allocated, p.allocated);
    plan_.peak_reserved = std::max(plan_.peak_reserved, p.reserved);
    current_.clear();
  }
  const std::string& current() const { return current_; }

 private:
  train::MetaSession& session_;
  RunPlan& plan_;
  std::string current_;
  int64_t batch_ = 0, size_ = 0;
};

std::string size_text(int64_t size) { return str_cat(size, " px"); }

// Epochs replayed in a row whose block map at the end does not repeat the one before, after which the plan
// stops replaying (and says its figures are not exact).
constexpr int64_t kMaxEpochsWithoutRepeat = 4;

}  // namespace

RunPlan plan_run(const PlanInputs& in) {
  const RunConfig& c = *in.config;
  RunPlan plan;
  plan.device = in.device.str();
  plan.budget = in.budget;
  plan.planned = true;
  bool assumed = false;
  const AllocatorConfig cfg = train::meta_policy_for(in.device, &assumed);
  MetaTargetScope imitate(in.device.is_meta() ? Device::cpu() : in.device);
  const RngState rng_before = global_rng();
  {
    train::MetaSession session(cfg, (size_t)std::max<int64_t>(in.budget, 0));
    PhaseTracker phases(session, plan);
    std::string where = "set-up (model, optimizer state, data-parallel buckets, loss scaler)";
    try {
      phases.enter("set-up", 0, in.model.image_size);
      RunSetup s;
      build_model_and_optimizer(s, c, in.model, Device::meta());
      make_data_parallel(s, c, nullptr);
      make_class_weights(s, c, in.model.num_classes, Device::meta());
      make_loss_scaler(s, c, Device::meta());
      phases.leave();

      MetaSource train(*in.train, in.image_size);
      std::optional<MetaSource> val;
      if (in.val) val.emplace(*in.val, in.image_size);
      auto digest = [&session] { return session.layout_digest(); };
      train.set_repeat_check(digest);
      if (val) val->set_repeat_check(digest);

      train::FitOptions fo = run_fit_options(c, s);
      fo.watch_memory = false;
      int64_t run_step = 0;
      fo.callbacks.before_step = [&](const train::FitStep& fs) {
        where = str_cat("epoch ", fs.epoch + 1, ", step ", fs.step_in_epoch + 1, " (batch ", fs.rows, " x ",
                        size_text(fs.size), ")");
        phases.enter(step_phase_name(run_step == 0, train.at_short_last(), fs.rows, fs.size), fs.rows, fs.size);
        ++run_step;
      };
      fo.evaluate = [&, run_eval = fo.evaluate](nn::Module& m, DataSource& v, int64_t epoch) {
        where = str_cat("validation after epoch ", epoch + 1);
        phases.enter(validation_phase_name(c.batch, v.image_size(epoch)), c.batch, v.image_size(epoch));
        EvalResult r = run_eval ? run_eval(m, v, epoch)
                                : evaluate_source(m, v, c.batch, epoch, s.class_weights);
        phases.leave();
        return r;
      };
      // Epochs: replayed until the block map at an epoch's end repeats the one an epoch earlier; then the
      // epochs up to the next image size (or the end) repeat it.
      uint64_t last_end = 0;
      bool have_end = false;
      int64_t unrepeated = 0;  // epochs replayed in a row without the map repeating
      for (int64_t e = in.start_epoch; e < c.epochs;) {
        fo.start_epoch = e;
        fo.epochs = e + 1;
        fo.start_step = run_step;
        fo.start_step_in_epoch = e == in.start_epoch ? in.start_step_in_epoch : 0;
        train::fit(*s.model, *s.opt, s.amp->scaler(), train, val ? &*val : nullptr, fo);
        phases.leave();
        plan.steps_replayed += train.delivered() - train.skipped();
        ++plan.epochs_replayed;
        if (train.skipped() > 0)
          plan.notes.push_back(str_cat("epoch ", e + 1, ": the block map repeats from step ",
                                       train.delivered() - train.skipped() - (train.at_short_last() ? 1 : 0),
                                       "; ", train.skipped(), " steps of the same batch not replayed"));
        const uint64_t end = session.layout_digest();
        int64_t next = e + 1;
        if (have_end && end == last_end) {
          while (next < c.epochs && train.image_size(next) == train.image_size(e) &&
                 (!val || val->image_size(next) == val->image_size(e)))
            ++next;
          unrepeated = 0;
        } else if (++unrepeated >= kMaxEpochsWithoutRepeat && next < c.epochs) {
          // An epoch order that never repeats (--batch-memory's shuffled buckets): the rest is not replayed.
          plan.exact = false;
          plan.notes.push_back(str_cat("epochs ", next + 1, "-", c.epochs, " not replayed: the block map did not repeat "
                                       "within ", kMaxEpochsWithoutRepeat, " epochs; the figures are those of epochs ",
                                       e + 2 - kMaxEpochsWithoutRepeat, "-", e + 1, ", not a bound of the rest"));
          break;
        }
        if (next > e + 1) plan.notes.push_back(str_cat("epochs ", e + 2, "-", next, " repeat epoch ", e + 1));
        last_end = end;
        have_end = true;
        e = next;
      }
    } catch (const OutOfMemory& e) {
      phases.leave();
      plan.oom_where = where;
      plan.oom_message = e.what();
    } catch (const Error& e) {
      // Anything else the replay meets, the run would meet at the same step (a batch too small for batch
      // norm, a model that does not take the size): one error naming where, before anything is built.
      global_rng() = rng_before;
      const bool short_last = phases.current().rfind("short last batch", 0) == 0;
      throw Error(str_cat("the run's plan (its steps replayed on the meta device) fails at ", where, ": ", e.what(),
                          short_last ? "; it is the epoch's short last batch: --drop-last leaves it out (or choose "
                                       "another --batch)"
                                     : ""));
    }
  }
  global_rng() = rng_before;
  if (!plan.oom_where.empty()) plan.notes.push_back("out of memory in the replay at " + plan.oom_where);
  if (assumed) plan.notes.push_back("the allocator policy of " + in.device.str() + " is assumed (no such device here)");
  if (in.device.is_cuda()) {
    plan.cuda = true;
    plan.policy_assumed = assumed;
    plan.gpu = cuda_bounds(plan.peak_reserved, cfg.expandable, (int64_t)cfg.granule);
  }
  return plan;
}

}  // namespace kiln
