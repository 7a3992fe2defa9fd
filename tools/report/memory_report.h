// The memory report: one self-contained HTML page (inline CSS, SVG and a few lines of JS; nothing
// fetched from the network) with a stacked timeline of live bytes by tag over one training step
// (from the allocator's Chrome trace), the activations saved per layer, the allocator's segment
// map at the peak, and predicted vs measured peaks. Written by `kiln mem --report` and
// `kiln train --memory-report`. Must not run models: it draws what it is given.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/run/mem_predict.h"

namespace kiln {

// Live bytes per tag after each counter event of a Chrome trace written by
// CachingAllocator::chrome_trace(), in event order.
struct TimelinePoint {
  double ts_us = 0;
  TagBytes bytes{};
};
std::vector<TimelinePoint> timeline_from_trace(const nlohmann::json& trace);

std::string render_memory_report(const MemPrediction& p, const MemMeasured& m);
// Writes the page atomically; throws kiln::Error naming the path on failure.
void write_memory_report(const std::string& path, const MemPrediction& p, const MemMeasured& m);

}  // namespace kiln
