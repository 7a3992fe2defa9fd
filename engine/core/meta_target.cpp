// Thread-local target of meta runs (see meta_target.h).
#include "engine/core/meta_target.h"

namespace kiln {

static Device& target() {
  thread_local Device d = Device::cpu();
  return d;
}

Device meta_target() { return target(); }
MetaTargetScope::MetaTargetScope(Device t) : prev_(target()) { target() = t; }
MetaTargetScope::~MetaTargetScope() { target() = prev_; }

}  // namespace kiln
