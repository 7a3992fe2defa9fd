// `kiln mem` (see mem_command.h).
#include "tools/mem_command.h"

#include "models/registry.h"

#include "engine/core/usage_error.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "engine/core/error.h"
#include "engine/memory/alloc_config.h"
#include "engine/core/devices.h"
#include "engine/run/cuda_bounds.h"
#include "engine/train/memory_peak.h"
#include "tools/report/memory_report.h"

namespace kiln {

namespace {

// What one step's prediction leaves out of a run (kiln train --dry-run plans them: engine/run/plan_run.h).
constexpr const char* kLeftOut =
    "validation, a short last batch, an image-size schedule, --batch-memory's buckets, the batches' handover by the "
    "loader, a --resume point, and the allocator's state after earlier epochs";

std::string human(int64_t b) {
  char buf[32];
  return format_bytes(b, buf, sizeof buf);
}

void print_text(const MemPrediction& p, std::ostream& out) {
  const RunConfig& t = p.config.train;
  char line[256];
  out << "kiln mem: " << t.model << ", batch " << t.batch << " (accum " << t.accum << "), " << p.config.in_channels
      << "x" << p.config.image_size << "x" << p.config.image_size << ", "
      << (t.num_classes > 0 ? t.num_classes : p.config.num_classes) << " classes, " << t.optimizer
      << (t.optimizer == "sgd" && t.momentum > 0 ? " (momentum)" : "") << ", checkpoint "
      << (p.config.recompute <= 0 ? std::string("off")
          : models::is_segmentation_model(t.model)
              ? std::to_string(p.config.recompute) + " resolution level(s) recomputed (unet)"
              : std::to_string(p.config.recompute) + " of " + std::to_string(p.num_stages) + " stages")
      << (t.amp ? std::string(", amp ") + dtype_name(t.amp_dtype) : std::string()) << ", device " << p.target
      << (p.cpu_threads > 0 ? ", " + std::to_string(p.cpu_threads) + (p.cpu_threads == 1 ? " thread" : " threads") : "")
      << " (predicted on meta)\n";
  const std::pair<const char*, int64_t> acc[] = {{"parameters", p.params},
                                                 {"gradients", p.grads},
                                                 {"optimizer state", p.optimizer},
                                                 {"activations (saved, end of forward)", p.activations},
                                                 {"temporaries at the peak", p.temporaries_at_peak},
                                                 {"input data", p.data},
                                                 {"allocator slack (reserved - allocated)", p.slack}};
  for (const auto& [n, b] : acc) {
    std::snprintf(line, sizeof line, "  %-40s %12s  %14lld B\n", n, human(b).c_str(), (long long)b);
    out << line;
  }
  std::snprintf(line, sizeof line, "  %-40s %12s  %14lld B   (first step %s, steady %s)\n", "peak allocated",
                human(p.peak_allocated).c_str(), (long long)p.peak_allocated, human(p.first.allocated).c_str(),
                human(p.steady.allocated).c_str());
  out << line;
  std::snprintf(line, sizeof line, "  %-40s %12s  %14lld B\n", "peak reserved", human(p.peak_reserved).c_str(),
                (long long)p.peak_reserved);
  out << line;
  if (p.ranks > 1) {
    std::snprintf(line, sizeof line, "  %-40s %12s  %14lld B   %s\n", "data-parallel buckets (per rank)",
                  human(p.buckets).c_str(), (long long)p.buckets,
                  "(the gradients themselves: in every number above)");
    out << line;
    out << "  (" << p.ranks << " ranks: every number is one rank's, at --batch " << t.batch
        << " per rank; the gradients live in the buckets, runs of --bucket-mb " << t.bucket_mb
        << ", with one 4-byte flag per parameter)\n";
  }
  out << "  (input data is one batch, x and y, as an in-memory data set (IDX, npy) holds it: exact there. An image\n"
         "  folder's loader holds 1 to --prefetch + 2 batch buffers of that size, as far as its workers decode ahead,\n"
         "  so its measured peak allocated can exceed this one by up to (--prefetch + 1) x input data)\n";
  out << "activations saved per layer (module that allocated them):\n";
  for (const auto& [m, b] : p.layer_activations) {
    std::snprintf(line, sizeof line, "  %-40s %12s  %5.1f%%\n", m.c_str(), human(b).c_str(),
                  p.activations ? 100.0 * (double)b / (double)p.activations : 0.0);
    out << line;
  }
}

// What a prediction for a cuda target adds to the meta run, and how sure each part is
// (engine/run/cuda_bounds.h), with the --amp weight copies inside the peak.
struct CudaExtras : CudaBounds {
  int64_t f16_copies = 0;  // exact: the autocast weight copies inside the meta peak (--amp)
};

CudaExtras cuda_extras(const MemPrediction& p) {
  CudaExtras e;
  const int t16 = (int)MemoryTag::param_f16;
  static_cast<CudaBounds&>(e) = cuda_bounds(p.peak_reserved, p.expandable, p.granule);
  e.f16_copies = std::max(p.first.tag_peak[t16], p.steady.tag_peak[t16]);
  return e;
}

// The meta replay takes the CUDA path's own allocations (f32 and --amp alike: a 16-bit convolution
// replays conv2d's cuDNN path, without the CPU's f32 staging), so kiln's allocations are exact for the
// policy; what kiln cannot know (the workspace cuDNN picks per call) is the kernel scratch bound below.
const char* peak_kind(const MemPrediction&) { return "exact"; }

nlohmann::json cuda_json(const MemPrediction& p, const CudaExtras& e, int64_t budget) {
  // Each figure: its bytes, its kind (exact, bound, estimate) and "exact" as a boolean (as --dry-run's figures).
  auto fig = [](int64_t b, const char* kind) {
    return nlohmann::json{{"bytes", b}, {"kind", kind}, {"exact", std::string(kind) == "exact"}};
  };
  nlohmann::json f16 = fig(e.f16_copies, "exact"), cublas = fig(e.cublas_bound, "bound"),
                 context = fig(e.context_estimate, "estimate");
  f16["in_peak"] = true;
  cublas["outside_allocator"] = true;
  context["outside_allocator"] = true;
  return {{"policy", p.policy},
          {"policy_assumed", p.policy_assumed},
          {"expandable", p.expandable},
          {"granule", p.granule},
          {"peak_reserved", fig(p.peak_reserved, peak_kind(p))},
          {"f16_copies", f16},
          {"cudnn_workspace_limit", e.cudnn_limit},
          {"kernel_scratch", fig(e.scratch_bound, "bound")},
          {"allocator_peak_reserved", fig(e.allocator_bound, "bound")},
          {"cublas_workspace", cublas},
          {"cuda_context", context},
          {"card_total", fig(e.card_bound, "bound")},
          {"fits_with_bounds", e.card_bound <= budget}};
}

void print_cuda(const MemPrediction& p, const CudaExtras& e, int64_t budget, std::ostream& out) {
  char line[320];
  auto row = [&](const char* what, int64_t b, const char* kind) {
    std::snprintf(line, sizeof line, "  %-48s %12s  %-8s\n", what, human(b).c_str(), kind);
    out << line;
  };
  out << "cuda allocator policy: " << p.policy
      << (p.policy_assumed ? " (assumed: kiln's CUDA default; no such device here to ask)" : " (the device's)") << "\n";
  out << "on " << p.target << " (exact: the meta replay of kiln's own allocations with this policy; bound: an upper "
      << "limit; estimate: not measured):\n";
  row("kiln's allocations, peak reserved", p.peak_reserved, peak_kind(p));
  if (p.config.train.amp) {
    const std::string dt = dtype_name(p.config.train.amp_dtype);
    row(("  of which " + dt + " weight copies (--amp " + dt + ")").c_str(), e.f16_copies, "exact");
  }
  char what[96];
  std::snprintf(what, sizeof what, "+ kernel scratch (cuDNN workspace <= %s)", human(e.cudnn_limit).c_str());
  row(what, e.scratch_bound, "bound");
  row("= kiln's allocator, peak reserved", e.allocator_bound, "bound");
  row("+ cuBLAS workspace (cuBLAS's own pool)", e.cublas_bound, "bound");
  row("+ CUDA context and library modules", e.context_estimate, "estimate");
  row("= card memory needed", e.card_bound, "bound");
  out << "  (--device-memory limits kiln's allocator on a GPU; cuBLAS's pool and the context come on top; the cuDNN "
         "limit is KILN_CUDNN_WORKSPACE_LIMIT, cuBLAS's pool CUBLAS_WORKSPACE_CONFIG)\n";
  out << "budget " << human(budget) << " with the bounds and the estimate: "
      << (e.card_bound <= budget ? "fits" : "does NOT fit") << "\n";
}

}  // namespace

void run_mem_command(const MemCommandOptions& o, std::ostream& out) {
  MemConfig c = o.config;
  const Device target = c.train.device == "auto" ? resolve_device("auto") : Device::parse(c.train.device);
  const int64_t budget = o.device_memory.empty() ? device_budget(target) : (int64_t)parse_bytes(o.device_memory);
  nlohmann::json extra;
  const int ck = parse_recompute_option(o.recompute);
  if (ck < 0) {
    std::vector<std::pair<int, int64_t>> tried;
    c.recompute = choose_recompute(c, budget, &tried);
    extra["checkpoint_auto"] = {{"budget", budget}, {"chosen", c.recompute}};
    for (auto& [s, pk] : tried) extra["checkpoint_auto"]["tried"].push_back({{"segments", s}, {"peak_reserved", pk}});
    if (!o.json) {
      out << "--checkpoint auto: budget " << human(budget) << "; tried";
      for (auto& [s, pk] : tried) out << " " << s << ":" << human(pk);
      out << " -> " << c.recompute << (models::is_segmentation_model(c.train.model) ? " resolution level(s)\n" : " segments\n");
    }
  } else {
    c.recompute = ck;
  }
  c.detail = !o.report.empty();
  MemPrediction p = predict_memory(c);
  nlohmann::json j = p.to_json();
  j["budget"] = budget;
  j["fits"] = p.peak_reserved <= budget;
  j["covers"] = "two training steps (the first and a steady one) at one batch and image size";
  j["leaves_out"] = kLeftOut;
  if (!extra.is_null()) j.update(extra);
  j["policy"] = p.policy;
  const bool cuda = target.is_cuda();
  CudaExtras ce;
  if (cuda) {
    ce = cuda_extras(p);
    j["cuda"] = cuda_json(p, ce, budget);
  }
  if (o.max_batch) {
    MaxBatchResult mb = find_max_batch(c, budget, o.margin);
    j["max_batch"] = {{"batch", mb.batch}, {"peak_reserved", mb.peak_reserved}, {"margin", o.margin},
                      {"budget", budget}};
    for (auto& [b, pk] : mb.probes) j["max_batch"]["probes"].push_back({{"batch", b}, {"peak_reserved", pk}});
    if (!o.json) {
      out << "max batch: " << mb.batch << " (peak reserved " << human(mb.peak_reserved) << " <= "
          << human((int64_t)((double)budget * (1 - o.margin))) << " = budget " << human(budget) << " less "
          << o.margin * 100 << "% margin; " << mb.probes.size() << " meta runs)\n";
    }
  }
  if (!o.report.empty()) write_memory_report(o.report, p, MemMeasured{});
  if (o.json) {
    out << j.dump() << "\n";
    return;
  }
  print_text(p, out);
  out << "covers: two training steps (the first and a steady one) of batch " << c.train.batch << " at "
      << c.image_size << " px; leaves out what a run adds: " << kLeftOut
      << " (kiln train <the run's flags> --dry-run plans the whole run)\n";
  out << "budget " << human(budget) << ": " << (p.peak_reserved <= budget ? "fits" : "does NOT fit") << "\n";
  if (cuda) print_cuda(p, ce, budget, out);
  if (!o.report.empty()) out << "report: " << o.report << "\n";
}

}  // namespace kiln
