// Memory tags: every allocation is attributed to what it is for (param, grad, optimizer,
// activation, temporary, data, other; param_f16: the per-step lower-precision copies of the
// master weights that autocast makes) and to the module path that asked for it. A thread-local
// scope sets both; the allocator reads them at allocation time.
#pragma once
#include <cstdint>
#include <string>

namespace kiln {

enum class MemoryTag : uint8_t { param, grad, optimizer, activation, temporary, data, other, param_f16 };
constexpr int kNumMemoryTags = 8;

const char* tag_name(MemoryTag t);

struct MemoryContext {
  MemoryTag tag = MemoryTag::other;
  std::string module;  // "layer2.1.conv1", empty at top level
};

// The calling thread's current context.
const MemoryContext& memory_context();

// Sets the tag for allocations made while it lives (restores the previous on destruction).
class MemoryScope {
 public:
  explicit MemoryScope(MemoryTag tag);
  MemoryScope(MemoryTag tag, const std::string& module);
  ~MemoryScope();
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

 private:
  MemoryContext saved_;
};

// Appends a component to the module path ("layer2" then "1" gives "layer2.1") for its lifetime.
class ModuleScope {
 public:
  explicit ModuleScope(const std::string& name);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  size_t saved_len_;
};

}  // namespace kiln
