#include "engine/memory/tag.h"

namespace kiln {

const char* tag_name(MemoryTag t) {
  switch (t) {
    case MemoryTag::param: return "param";
    case MemoryTag::grad: return "grad";
    case MemoryTag::optimizer: return "optimizer";
    case MemoryTag::activation: return "activation";
    case MemoryTag::temporary: return "temporary";
    case MemoryTag::data: return "data";
    case MemoryTag::other: return "other";
    case MemoryTag::param_f16: return "param_f16";
  }
  return "?";
}

static MemoryContext& ctx() {
  thread_local MemoryContext c;
  return c;
}

const MemoryContext& memory_context() { return ctx(); }

MemoryScope::MemoryScope(MemoryTag tag) : saved_(ctx()) { ctx().tag = tag; }
MemoryScope::MemoryScope(MemoryTag tag, const std::string& module) : saved_(ctx()) {
  ctx().tag = tag;
  ctx().module = module;
}
MemoryScope::~MemoryScope() { ctx() = saved_; }

ModuleScope::ModuleScope(const std::string& name) : saved_len_(ctx().module.size()) {
  if (!ctx().module.empty()) ctx().module += '.';
  ctx().module += name;
}
ModuleScope::~ModuleScope() { ctx().module.resize(saved_len_); }

}  // namespace kiln
