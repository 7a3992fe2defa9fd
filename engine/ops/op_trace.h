// Op spans for the Chrome trace: while enabled, every backend kernel launch made through
// KILN_DISPATCH records (kernel name, module path, begin, end) on the steady clock, the clock the
// allocator's event trace uses, so `kiln train --trace` shows op spans under the memory counters.
// Off by default; when off a span costs one relaxed atomic load.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace kiln {

struct OpSpan {
  const char* name;  // the kernel's name as written at the dispatch site (a string literal)
  std::string module;
  uint64_t begin_ns = 0, end_ns = 0;  // steady clock
};

void op_trace_enable(bool on);
bool op_trace_enabled();
// Returns the spans recorded so far and clears them.
std::vector<OpSpan> op_trace_take();
// Appends the spans as Chrome "X" events (pid 1, tid 1) to trace["traceEvents"], with timestamps
// relative to t0_ns (the allocator trace's origin) in microseconds.
void append_op_spans(nlohmann::json& trace, const std::vector<OpSpan>& spans, uint64_t t0_ns);

class OpSpanScope {
 public:
  explicit OpSpanScope(const char* name);
  ~OpSpanScope();
  OpSpanScope(const OpSpanScope&) = delete;
  OpSpanScope& operator=(const OpSpanScope&) = delete;

 private:
  const char* name_;
  uint64_t begin_ = 0;
};

}  // namespace kiln
