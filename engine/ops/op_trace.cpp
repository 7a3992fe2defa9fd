#include "engine/ops/op_trace.h"

#include <atomic>
#include <chrono>
#include <mutex>

#include <nlohmann/json.hpp>

#include "engine/memory/tag.h"

namespace kiln {
namespace {

std::atomic<bool> g_enabled{false};
std::mutex g_mu;
std::vector<OpSpan> g_spans;

uint64_t steady_ns() {
  return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void op_trace_enable(bool on) { g_enabled.store(on, std::memory_order_relaxed); }
bool op_trace_enabled() { return g_enabled.load(std::memory_order_relaxed); }

std::vector<OpSpan> op_trace_take() {
  std::lock_guard<std::mutex> g(g_mu);
  std::vector<OpSpan> out;
  out.swap(g_spans);
  return out;
}

void append_op_spans(nlohmann::json& trace, const std::vector<OpSpan>& spans, uint64_t t0_ns) {
  nlohmann::json& ev = trace["traceEvents"];
  ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 1}, {"args", {{"name", "ops"}}}});
  for (const OpSpan& s : spans) {
    if (s.begin_ns < t0_ns) continue;  // before the allocator trace's window
    ev.push_back({{"name", s.name},
                  {"ph", "X"},
                  {"pid", 1},
                  {"tid", 1},
                  {"ts", (double)(s.begin_ns - t0_ns) / 1000.0},
                  {"dur", (double)(s.end_ns - s.begin_ns) / 1000.0},
                  {"args", {{"module", s.module}}}});
  }
}

OpSpanScope::OpSpanScope(const char* name) : name_(name) {
  if (g_enabled.load(std::memory_order_relaxed)) begin_ = steady_ns();
}

OpSpanScope::~OpSpanScope() {
  if (!begin_) return;
  OpSpan s{name_, memory_context().module, begin_, steady_ns()};
  std::lock_guard<std::mutex> g(g_mu);
  g_spans.push_back(std::move(s));
}

}  // namespace kiln
