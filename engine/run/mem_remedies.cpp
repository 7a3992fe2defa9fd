// Remedies for a step that does not fit its memory budget (see mem_remedies.h).
#include "engine/run/mem_remedies.h"

#include <algorithm>
#include <sstream>

#include "engine/core/error.h"
#include "engine/memory/alloc_config.h"

namespace kiln {

namespace {

std::string fits_text(int64_t peak, int64_t budget) {
  return peak <= budget ? format_bytes((double)peak) + " (fits)" : std::string("does not fit");
}

void append_remedies(std::ostringstream& o, const std::vector<MemRemedy>& remedies, int64_t budget) {
  o << remedies_text(remedies, budget);
}

}  // namespace

std::string remedies_text(const std::vector<MemRemedy>& remedies, int64_t budget) {
  std::string out;
  for (const MemRemedy& r : remedies) {
    out += "\n  " + r.option + ": " + fits_text(r.peak_reserved, budget);
    if (!r.note.empty()) out += "; " + r.note;
  }
  return out;
}

std::vector<MemRemedy> find_memory_remedies(const MemConfig& c, int64_t budget, bool image_size_applies,
                                            const StepMemory* predicted, const PeakOf& peak_of) {
  std::vector<MemRemedy> out;
  if (predicted) {
    // A lower bound of every remedy's peak: each keeps the model's f32 weights, their gradients and
    // the optimizer's state (--amp adds f16 copies to them).
    const int64_t fixed = predicted->params + predicted->grads + predicted->optimizer;
    if (fixed > budget) {
      out.push_back({"--batch, --accum, --amp, --recompute, --image-size",
                     "none can fit: parameters + gradients + optimizer state alone take " +
                         format_bytes((double)fixed) + " (a smaller model, SGD without momentum or a larger device)",
                     fixed, false});
      return out;
    }
  }
  const int64_t batch = c.train.batch, accum = c.train.accum;

  // The largest batch below this one (same --accum, capped at the batch): never the failing batch or a larger.
  if (batch > 1) {
    const MaxBatchResult mb = find_max_batch(c, budget, 0.0, peak_of, batch - 1);
    if (mb.batch >= 1) {
      std::string opt = "--batch " + std::to_string(mb.batch);
      if (accum > mb.batch) opt += " --accum " + std::to_string(mb.batch);  // accum <= batch
      MemRemedy r{opt, "", mb.peak_reserved, true};
      for (const auto& [b, p] : mb.probes)
        if (b == mb.batch + 1 && b < batch && p > budget) r.note = "--batch " + std::to_string(b) + " does not fit";
      out.push_back(r);
    } else {
      out.push_back({"--batch 1", "even one sample does not fit", mb.probes.empty() ? 0 : mb.probes.front().second,
                     false});
    }
  }

  // --accum at the same effective batch: the fewest micro-batches that fit (doubling, then the batch).
  if (batch > accum) {
    std::vector<int64_t> tries;
    for (int64_t a = accum * 2; a < batch; a *= 2) tries.push_back(a);
    tries.push_back(batch);
    MemRemedy last;
    bool found = false;
    for (int64_t a : tries) {
      MemConfig k = c;
      k.train.accum = a;
      const int64_t p = peak_of(k);
      last = {"--accum " + std::to_string(a),
              "batch " + std::to_string(batch) + " as " + std::to_string(a) + " micro-batches", p, p <= budget};
      if (last.fits) {
        found = true;
        break;
      }
    }
    if (!found) last.note += "; no --accum fits";
    out.push_back(last);
  }

  // --amp.
  if (!c.train.amp) {
    MemConfig k = c;
    k.train.amp = true;
    k.train.amp_dtype = DType::f16;  // `--amp` alone
    const int64_t p = peak_of(k);
    out.push_back({"--amp", "f16 autocast", p, p <= budget});
  }

  // --recompute auto: the fewest recomputed stages that fit (not offered when that is no recompute at all).
  if (c.recompute == 0 && model_num_stages(c) >= 2) {
    std::vector<std::pair<int, int64_t>> tried;
    try {
      const int s = choose_recompute(c, budget, &tried, peak_of);
      int64_t p = 0;
      for (const auto& [seg, peak] : tried)
        if (seg == s) p = peak;
      if (s > 0) out.push_back({"--recompute " + std::to_string(s), "recompute auto's choice", p, true});
    } catch (const Error&) {
      int best = 0;
      int64_t p = INT64_MAX;
      for (const auto& [seg, peak] : tried)
        if (peak < p) p = peak, best = seg;
      out.push_back({"--recompute auto",
                     best == 0 ? "no segment count lowers the peak"
                               : "no segment count fits; the lowest peak is with " + std::to_string(best) + " segments",
                     p, false});
    }
  }

  // A smaller --image-size: the largest multiple of 8 below the current size that fits (bisection).
  if (image_size_applies && c.image_size > 8) {
    auto fits_at = [&](int64_t s, int64_t* peak) {
      MemConfig k = c;
      k.image_size = s;
      try {
        *peak = peak_of(k);
      } catch (const Error&) {  // too small for the model
        *peak = INT64_MAX;
      }
      return *peak <= budget;
    };
    int64_t lo = 0, hi = (c.image_size - 1) / 8 + 1, lo_peak = 0, p = 0;  // lo*8 fits (0: none), hi*8 does not
    int64_t smallest_peak = INT64_MAX;
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (fits_at(mid * 8, &p)) lo = mid, lo_peak = p;
      else hi = mid, smallest_peak = std::min(smallest_peak, p);
    }
    if (lo >= 1) {
      out.push_back({"--image-size " + std::to_string(lo * 8), "", lo_peak, true});
    } else if (smallest_peak != INT64_MAX) {
      out.push_back({"--image-size 8", "no smaller image size fits", smallest_peak, false});
    }
  }
  return out;
}

std::string format_memory_stop(const MemConfig& c, const StepMemory& p, int64_t budget, const std::string& budget_what,
                               const std::vector<MemRemedy>& remedies) {
  const int64_t predicted = p.peak_reserved, fixed = p.params + p.grads + p.optimizer;
  std::ostringstream o;
  o << "memory: the predicted peak of one training step, " << format_bytes((double)predicted)
    << " reserved (meta run: " << c.train.model << ", batch " << c.train.batch;
  if (c.train.accum > 1) o << " in " << c.train.accum << " micro-batches";
  o << ", " << c.in_channels << "x" << c.image_size << "x" << c.image_size << ", " << c.train.device
    << " allocator policy), does not fit the budget of " << format_bytes((double)budget) << " (" << budget_what
    << "); stopped before the first step (the model is not built yet).\n"
    << "parameters + gradients + optimizer state take " << format_bytes((double)fixed)
    << " of it whatever the batch" << (fixed > budget ? " (more than the budget by themselves)" : "") << ".\n"
    << "remedies (each alone, predicted peak reserved from a meta run of the same step):";
  append_remedies(o, remedies, budget);
  o << "\n  --force: run anyway (it will likely run out of memory)";
  return o.str();
}

std::string format_plan_stop(const RunPlan& plan, const std::string& budget_what,
                             const std::vector<MemRemedy>& remedies, const RunPlan& needs) {
  std::ostringstream o;
  o << "memory: the run's plan (its training replayed on the meta device, " << plan.device
    << " allocator policy) does not fit the budget of " << format_bytes((double)plan.budget) << " (" << budget_what
    << "): ";
  if (!plan.oom_where.empty()) {
    o << "it runs out of memory at " << plan.oom_where;
  } else {
    const PhasePlan* worst = nullptr;
    for (const PhasePlan& p : plan.phases)
      if (!worst || p.peak_reserved > worst->peak_reserved) worst = &p;
    o << "peak reserved " << format_bytes((double)plan.peak_reserved);
    if (worst) o << " in its phase '" << worst->name << "'";
  }
  o << "; without that limit it would take " << format_bytes((double)needs.peak_reserved) << " reserved ("
    << format_bytes((double)needs.peak_allocated) << " allocated); stopped before the first step (the model is not "
    << "built yet; the plan is above).\n"
    << "remedies (each alone: the run's plan with that one change, replayed within the budget):";
  append_remedies(o, remedies, plan.budget);
  o << "\n  --force: run anyway (it will run out of memory where the plan says)";
  return o.str();
}

}  // namespace kiln
