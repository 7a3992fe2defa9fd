#include "engine/autograd/grad_mode.h"

namespace kiln {

static bool& flag() {
  thread_local bool on = true;
  return on;
}
bool grad_enabled() { return flag(); }
void set_grad_enabled(bool on) { flag() = on; }
NoGradGuard::NoGradGuard() : prev_(flag()) { flag() = false; }
NoGradGuard::~NoGradGuard() { flag() = prev_; }
EnableGradGuard::EnableGradGuard() : prev_(flag()) { flag() = true; }
EnableGradGuard::~EnableGradGuard() { flag() = prev_; }

}  // namespace kiln
