// The per-thread gradient-accumulated hook (see grad_hook.h).
#include "engine/autograd/grad_hook.h"

#include <utility>

namespace kiln {

namespace {
thread_local GradAccumulatedHook tls_hook;
}  // namespace

GradAccumulatedHookGuard::GradAccumulatedHookGuard(GradAccumulatedHook hook) : prev_(std::move(tls_hook)) {
  tls_hook = std::move(hook);
}

GradAccumulatedHookGuard::~GradAccumulatedHookGuard() { tls_hook = std::move(prev_); }

const GradAccumulatedHook& grad_accumulated_hook() { return tls_hook; }

}  // namespace kiln
