// `kiln mem` (see mem_command.h).
#include "tools/mem_command.h"

#include <cstdio>
#include <cstdlib>

#include "engine/core/error.h"
#include "engine/memory/alloc_config.h"
#include "engine/core/devices.h"
#include "engine/train/memory_peak.h"
#include "tools/report/memory_report.h"

namespace kiln {

namespace {

std::string human(int64_t b) {
  char buf[32];
  return format_bytes(b, buf, sizeof buf);
}

void print_text(const MemPrediction& p, std::ostream& out) {
  const TrainConfig& t = p.config.train;
  char line[256];
  out << "kiln mem: " << t.model << ", batch " << t.batch << " (accum " << t.accum << "), " << p.config.in_channels
      << "x" << p.config.image_size << "x" << p.config.image_size << ", "
      << (t.num_classes > 0 ? t.num_classes : p.config.num_classes) << " classes, " << t.optimizer
      << (t.optimizer == "sgd" && t.momentum > 0 ? " (momentum)" : "") << ", checkpoint "
      << (p.config.checkpoint > 0 ? std::to_string(p.config.checkpoint) + " of " + std::to_string(p.num_stages) +
                                        " stages"
                                  : "off")
      << (t.amp ? ", amp f16" : "") << ", device " << p.target << " (predicted on meta)\n";
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
  out << "activations saved per layer (module that allocated them):\n";
  for (const auto& [m, b] : p.layer_activations) {
    std::snprintf(line, sizeof line, "  %-40s %12s  %5.1f%%\n", m.c_str(), human(b).c_str(),
                  p.activations ? 100.0 * (double)b / (double)p.activations : 0.0);
    out << line;
  }
}

}  // namespace

int parse_checkpoint_option(const std::string& text) {
  if (text == "auto") return -1;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  KILN_CHECK(!text.empty() && end == text.c_str() + text.size() && v >= 0 && v <= 1000, "--checkpoint '", text,
             "': expected a segment count >= 0 or auto");
  return (int)v;
}

void run_mem_command(const MemCommandOptions& o, std::ostream& out) {
  MemConfig c = o.config;
  const Device target = c.train.device == "auto" ? resolve_device("auto") : Device::parse(c.train.device);
  const int64_t budget = o.device_memory.empty() ? device_budget(target) : (int64_t)parse_bytes(o.device_memory);
  nlohmann::json extra;
  const int ck = parse_checkpoint_option(o.checkpoint);
  if (ck < 0) {
    std::vector<std::pair<int, int64_t>> tried;
    c.checkpoint = choose_checkpoint(c, budget, &tried);
    extra["checkpoint_auto"] = {{"budget", budget}, {"chosen", c.checkpoint}};
    for (auto& [s, pk] : tried) extra["checkpoint_auto"]["tried"].push_back({{"segments", s}, {"peak_reserved", pk}});
    if (!o.json) {
      out << "--checkpoint auto: budget " << human(budget) << "; tried";
      for (auto& [s, pk] : tried) out << " " << s << ":" << human(pk);
      out << " -> " << c.checkpoint << " segments\n";
    }
  } else {
    c.checkpoint = ck;
  }
  c.detail = !o.report.empty();
  MemPrediction p = predict_memory(c);
  nlohmann::json j = p.to_json();
  j["budget"] = budget;
  j["fits"] = p.peak_reserved <= budget;
  if (!extra.is_null()) j.update(extra);
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
  out << "budget " << human(budget) << ": " << (p.peak_reserved <= budget ? "fits" : "does NOT fit") << "\n";
  if (!o.report.empty()) out << "report: " << o.report << "\n";
}

}  // namespace kiln
