// The words and JSON of a run's memory plan (see run_plan.h).
#include "engine/run/run_plan.h"

#include <cstdio>

#include "engine/core/error.h"
#include "engine/memory/alloc_config.h"

namespace kiln {

std::string step_phase_name(bool first, bool short_last, int64_t rows, int64_t size) {
  return std::string(first ? "first step" : short_last ? "short last batch" : "steps") + ": batch " +
         std::to_string(rows) + " x " + std::to_string(size) + " px";
}

std::string validation_phase_name(int64_t batch, int64_t size) {
  return "validation: batch " + std::to_string(batch) + " x " + std::to_string(size) + " px";
}

const PhasePlan* RunPlan::phase(const std::string& name) const {
  for (const PhasePlan& p : phases)
    if (p.name == name) return &p;
  return nullptr;
}

std::string RunPlan::text() const {
  if (!planned) return "memory plan: none (" + why_not + ")\n";
  std::string out = "memory plan (" + device + ", the run replayed on the meta device: " +
                    std::to_string(steps_replayed) + " steps of " + std::to_string(epochs_replayed) + " epochs" +
                    (exact ? "" : "; NOT exact, see below") + "):\n";
  for (const PhasePlan& p : phases) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-36s peak allocated %10s  reserved %10s\n", p.name.c_str(),
                  format_bytes((double)p.peak_allocated).c_str(), format_bytes((double)p.peak_reserved).c_str());
    out += line;
  }
  for (const std::string& n : notes) out += "  (" + n + ")\n";
  out += "  whole run: peak allocated " + format_bytes((double)peak_allocated) + ", reserved " +
         format_bytes((double)peak_reserved) + "; budget " + format_bytes((double)budget) +
         (fits() ? ": fits\n" : ": does NOT fit\n");
  if (cuda) {
    const char* kind = exact ? "exact" : "not exact";
    out += "  on " + device + " (exact: kiln's own allocations replayed with " +
           (policy_assumed ? "kiln's CUDA allocator policy, assumed" : "the device's allocator policy") +
           "; bound: an upper limit; estimate: not measured):\n";
    char line[256];
    auto row = [&](const char* what, int64_t b, const char* k) {
      std::snprintf(line, sizeof line, "    %-48s %10s  %s\n", what, format_bytes((double)b).c_str(), k);
      out += line;
    };
    row("peak allocated (kiln's allocations)", peak_allocated, kind);
    row("peak reserved (kiln's allocations)", peak_reserved, kind);
    char what[96];
    std::snprintf(what, sizeof what, "+ kernel scratch (cuDNN workspace <= %s)", format_bytes((double)gpu.cudnn_limit).c_str());
    row(what, gpu.scratch_bound, "bound");
    row("= kiln's allocator, peak reserved", gpu.allocator_bound, "bound");
    row("+ cuBLAS workspace (cuBLAS's own pool)", gpu.cublas_bound, "bound");
    row("+ CUDA context and library modules", gpu.context_estimate, "estimate");
    row("= card memory needed", gpu.card_bound, "bound");
    out += "    budget " + format_bytes((double)budget) + " with the bounds and the estimate: " +
           (gpu.card_bound <= budget ? "fits" : "does NOT fit") +
           " (--device-memory limits kiln's allocator; cuBLAS's pool and the context come on top)\n";
  }
  return out;
}

nlohmann::json RunPlan::to_json() const {
  nlohmann::json j = {{"planned", planned}, {"device", device}, {"budget", budget}, {"fits", fits()}};
  if (!planned) {
    j["why_not"] = why_not;
    return j;
  }
  j["peak_allocated"] = peak_allocated;
  j["peak_reserved"] = peak_reserved;
  j["exact"] = exact;
  j["steps_replayed"] = steps_replayed;
  j["epochs_replayed"] = epochs_replayed;
  j["notes"] = notes;
  if (!oom_where.empty()) j["out_of_memory_at"] = oom_where;
  auto fig = [](int64_t b, const char* kind) {
    return nlohmann::json{{"bytes", b}, {"kind", kind}, {"exact", std::string(kind) == "exact"}};
  };
  const char* own = exact ? "exact" : "not exact";
  j["figures"] = {{"peak_allocated", fig(peak_allocated, own)}, {"peak_reserved", fig(peak_reserved, own)}};
  if (cuda) {
    j["figures"]["kernel_scratch"] = fig(gpu.scratch_bound, "bound");
    j["figures"]["allocator_peak_reserved"] = fig(gpu.allocator_bound, "bound");
    j["figures"]["cublas_workspace"] = fig(gpu.cublas_bound, "bound");
    j["figures"]["cuda_context"] = fig(gpu.context_estimate, "estimate");
    j["figures"]["card_total"] = fig(gpu.card_bound, "bound");
    j["cuda"] = {{"policy_assumed", policy_assumed}, {"cudnn_workspace_limit", gpu.cudnn_limit},
                 {"fits_with_bounds", gpu.card_bound <= budget}};
  }
  j["phases"] = nlohmann::json::array();
  for (const PhasePlan& p : phases)
    j["phases"].push_back({{"name", p.name}, {"batch", p.batch}, {"image_size", p.image_size},
                           {"peak_allocated", p.peak_allocated}, {"peak_reserved", p.peak_reserved}});
  return j;
}

std::string measured_vs_planned_line(int64_t allocated, int64_t reserved, const RunPlan& plan) {
  if (allocated < 0) return "memory: whole run: no statistics on this device";
  auto one = [&](int64_t measured, int64_t planned) {
    std::string t = format_bytes((double)measured);
    if (!plan.planned) return t;
    t += " (planned " + format_bytes((double)planned);
    t += measured == planned ? ", exact)" : str_cat(", measured - planned = ", measured - planned, " bytes)");
    return t;
  };
  return "memory: whole run: peak allocated " + one(allocated, plan.peak_allocated) + ", peak reserved " +
         one(reserved, plan.peak_reserved);
}

}  // namespace kiln
