// Formats the OutOfMemory account (see oom_message.h).
#include "engine/memory/oom_message.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "engine/memory/alloc_config.h"

namespace kiln {

namespace {
std::string pct(double num, double den) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f%%", den > 0 ? 100.0 * num / den : 0.0);
  return b;
}
}  // namespace

std::string format_oom_message(const OomReport& r) {
  const MemoryStats& s = r.stats;
  auto tag = [&](MemoryTag t) { return (double)s.tag_allocated[(int)t].current; };
  double allocated = (double)s.total.allocated.current;
  double reserved = (double)s.total.reserved.current;
  double cap = (double)s.capacity;
  std::ostringstream o;
  o << "out of memory on " << r.device << " (" << r.provider << " provider): asked for "
    << format_bytes((double)r.requested) << " (rounded to " << format_bytes((double)r.rounded) << ")\n";
  o << "  capacity " << format_bytes(cap) << "; reserved " << format_bytes(reserved) << ", allocated "
    << format_bytes(allocated) << ", cached but free " << format_bytes((double)s.cached_free()) << "\n";
  char frag[32];
  std::snprintf(frag, sizeof frag, "%.1f%%", 100.0 * s.fragmentation());
  o << "  largest free block " << format_bytes((double)s.largest_free_block) << "; fragmentation " << frag
    << " (1 - allocated/reserved)\n";
  if (r.retried) o << "  the unused cache was released and the request retried once: still no room\n";
  double room = cap - reserved;
  if ((double)r.rounded > room && room >= 0)
    o << "  short by " << format_bytes((double)r.rounded - room) << " of unreserved capacity\n";

  // Per-tag breakdown, largest first.
  std::vector<std::pair<double, int>> tags;
  for (int t = 0; t < kNumMemoryTags; ++t) tags.push_back({tag((MemoryTag)t), t});
  std::sort(tags.begin(), tags.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  o << "  allocated by tag:";
  for (const auto& t : tags)
    if (t.first > 0)
      o << " " << tag_name((MemoryTag)t.second) << " " << format_bytes(t.first) << " (" << pct(t.first, allocated)
        << ")";
  o << "\n";
  if (!r.top_modules.empty()) {
    o << "  modules holding the most live bytes:";
    for (size_t i = 0; i < r.top_modules.size(); ++i)
      o << (i ? ", " : " ") << (r.top_modules[i].first.empty() ? "(top level)" : r.top_modules[i].first) << " "
        << format_bytes((double)r.top_modules[i].second);
    o << "\n";
  }

  // What to try. Activations and input batches scale with batch size and pixel count;
  // parameters, gradients and optimizer state do not.
  double act = tag(MemoryTag::activation), data = tag(MemoryTag::data), tmp = tag(MemoryTag::temporary);
  double per_sample = act + data;
  double fixed = tag(MemoryTag::param) + tag(MemoryTag::grad) + tag(MemoryTag::optimizer);
  o << "  what to try:\n";
  if (per_sample > 0) {
    o << "    - smaller --batch: activations + data are " << pct(per_sample, allocated)
      << " of allocated and scale with the batch: halving --batch frees ~" << format_bytes(per_sample / 2) << "\n";
    o << "    - --accum 2 with half the --batch: same effective batch, frees the same ~"
      << format_bytes(per_sample / 2) << "\n";
  }
  if (act > 0) {
    o << "    - --amp: f16 activations take half the bytes: frees up to ~" << format_bytes(act / 2) << " of the "
      << format_bytes(act) << " of activations (if not already on)\n";
    o << "    - --checkpoint: keeps only segment inputs and recomputes the rest in backward: frees up to ~"
      << format_bytes(act * 0.7) << " (about 70% of activations)\n";
    o << "    - smaller --image-size: activations scale with pixels: 3/4 of the side frees ~"
      << format_bytes(per_sample * (1 - 0.5625)) << ", half the side ~" << format_bytes(per_sample * 0.75) << "\n";
  }
  if (tmp > 0.25 * allocated)
    o << "    - temporaries (workspaces) hold " << format_bytes(tmp) << " (" << pct(tmp, allocated)
      << "): a smaller batch shrinks most of them too\n";
  if ((double)s.cached_free() >= (double)r.rounded && (double)s.largest_free_block < (double)r.rounded)
    o << "    - " << format_bytes((double)s.cached_free())
      << " is cached but no free block holds the request: fragmentation; try plan mode or "
         "KILN_ALLOC_CONF=max_split=<size> to keep large blocks whole\n";
  if (fixed > 0) {
    o << "    - param + grad + optimizer take " << format_bytes(fixed) << " (" << pct(fixed, cap)
      << " of capacity) whatever the batch";
    if (fixed >= cap) o << ": the model alone does not fit this device";
    else if (fixed > 0.5 * cap) o << "; a lighter optimizer (SGD keeps 1 buffer per parameter, AdamW 2) helps";
    o << "\n";
  }
  return o.str();
}

}  // namespace kiln
