// Allocator options of `kiln train` (see alloc_flags.h).
#include "engine/run/alloc_options.h"

#include <nlohmann/json.hpp>

#include "engine/ops/op_trace.h"

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/memory/alloc_config.h"
#include "engine/memory/caching_allocator.h"
#include "engine/train/memory_peak.h"

namespace kiln {

namespace {
constexpr size_t kTraceEvents = size_t(1) << 21;  // a ResNet18 step has a few thousand

void write_text(const std::string& path, const std::string& text, const char* what) {
  try {
    atomic_write_file(path, text.data(), text.size());
  } catch (const std::exception& e) {
    throw Error(str_cat(what, " ", path, ": ", e.what()));
  }
}
}  // namespace

void AllocOptions::validate() const {
  if (!device_memory.empty()) {
    const size_t b = parse_bytes(device_memory);
    KILN_CHECK(b >= (size_t(1) << 20), "--device-memory ", device_memory, ": at least 1M, please");
  }
}

nlohmann::json AllocOptions::to_json() const {
  return {{"device_memory", device_memory}, {"memory_snapshot", memory_snapshot}, {"trace", trace},
          {"alloc_trace", alloc_trace}};
}

void apply_device_memory(const AllocOptions& o, Device d, std::ostream& log) {
  if (o.device_memory.empty()) return;
  o.validate();
  const size_t bytes = parse_bytes(o.device_memory);
  set_device_memory_limit(d, bytes);
  log << "device memory: " << d.str() << " limited to " << format_bytes((double)bytes)
      << (d.is_cpu() ? " (a simulated small device)" : "") << "\n";
}

void FirstStepRecorder::begin() {
  if (!o_.wants_trace()) return;
  CachingAllocator* a = caching_allocator_for(d_);
  KILN_CHECK(a != nullptr, "--trace / --alloc-trace: ", d_.str(), " has no caching allocator");
  a->enable_trace(kTraceEvents);
  if (!o_.trace.empty()) {
    op_trace_take();  // drop spans from before the step
    op_trace_enable(true);
  }
}

void FirstStepRecorder::end(std::ostream& log) {
  if (done_) return;
  done_ = true;
  log << "memory after step 1: " << format_tag_peaks(d_) << "\n";
  CachingAllocator* a = caching_allocator_for(d_);
  if (!a) return;
  if (!o_.memory_snapshot.empty()) {
    write_text(o_.memory_snapshot, a->snapshot().dump(1) + "\n", "--memory-snapshot");
    log << "memory snapshot (end of step 1): " << o_.memory_snapshot << "\n";
  }
  if (!o_.trace.empty()) {
    op_trace_enable(false);
    nlohmann::json t = a->chrome_trace();
    const nlohmann::json& other = t.contains("otherData") ? t["otherData"] : nlohmann::json::object();
    if (other.contains("t0_ns")) append_op_spans(t, op_trace_take(), other["t0_ns"].get<uint64_t>());
    write_text(o_.trace, t.dump() + "\n", "--trace");
    log << "trace of step 1 (Chrome trace JSON: memory counters and op spans): " << o_.trace << "\n";
  }
  if (!o_.alloc_trace.empty()) {
    try {
      a->write_trace_file(o_.alloc_trace);
    } catch (const std::exception& e) {
      throw Error(str_cat("--alloc-trace ", o_.alloc_trace, ": ", e.what()));
    }
    log << "allocation trace (step 1, bench_alloc format): " << o_.alloc_trace << "\n";
  }
  if (o_.wants_trace()) a->enable_trace(0);
}

}  // namespace kiln
