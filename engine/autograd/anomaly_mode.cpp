// Anomaly detection (see anomaly_mode.h).
#include "engine/autograd/anomaly_mode.h"

#include <atomic>
#include <cmath>

#include "engine/autograd/grad_mode.h"
#include "engine/memory/tag.h"
#include "engine/ops/ops.h"

namespace kiln {
namespace {

std::atomic<bool> g_anomaly{false};

bool checkable(const Tensor& t) {
  return t.defined() && is_floating(t.dtype()) && !t.device().is_meta() && t.numel() > 0;
}

// "input 1 (fc.weight, (2, 16))" or "output 0 ((4, 2))".
std::string describe(const char* what, size_t i, const Tensor& t) {
  const std::string& n = t.name();
  return str_cat(what, " ", i, " (", n.empty() ? "" : n + ", ", shape_str(t.sizes()), ")");
}

}  // namespace

bool anomaly_mode_enabled() { return g_anomaly.load(std::memory_order_relaxed); }
void set_anomaly_mode(bool on) { g_anomaly.store(on, std::memory_order_relaxed); }

AnomalyModeGuard::AnomalyModeGuard(bool on) : prev_(anomaly_mode_enabled()) { set_anomaly_mode(on); }
AnomalyModeGuard::~AnomalyModeGuard() { set_anomaly_mode(prev_); }

bool all_finite(const Tensor& t) {
  if (!checkable(t)) return true;
  NoGradGuard ng;
  // isfinite_all is a one-element u8 on t's device; item() reads host memory, so copy it back.
  return to_device(isfinite_all(t.detach()), Device::cpu()).item() != 0.0;
}

std::string non_finite_kind(const Tensor& t) {
  if (!checkable(t)) return "a finite value";
  NoGradGuard ng;
  const std::vector<float> v = to_device(to_dtype(t.detach(), DType::f32), Device::cpu()).to_vector<float>();
  for (float x : v)
    if (std::isnan(x)) return "NaN";
  for (float x : v)
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return "a finite value";
}

void check_op_outputs(const char* op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (all_finite(outputs[i])) continue;
    const std::string module = memory_context().module;
    std::string cause;
    for (size_t k = 0; k < inputs.size(); ++k)
      if (!all_finite(inputs[k]))
        cause += str_cat(cause.empty() ? "" : ", ", describe("input", k, inputs[k]), " already held ",
                         non_finite_kind(inputs[k]));
    if (cause.empty()) cause = "all its inputs were finite";
    else cause += " (produced by no recorded op: the batch, a parameter or a buffer)";
    throw NonFiniteError(op, module,
                         str_cat(op, " in ", module.empty() ? "the top-level module" : module, ": ",
                                 describe("output", i, outputs[i]), " holds ", non_finite_kind(outputs[i]), "; ",
                                 cause));
  }
}

void check_op_gradients(const std::string& op, const std::string& module, const std::vector<Tensor>& grads) {
  for (size_t i = 0; i < grads.size(); ++i) {
    if (all_finite(grads[i])) continue;
    const std::string name = op + " backward";
    throw NonFiniteError(name, module,
                         str_cat(name, " in ", module.empty() ? "the top-level module" : module,
                                 ": the gradient of input ", i, " (", shape_str(grads[i].sizes()), ") holds ",
                                 non_finite_kind(grads[i])));
  }
}

}  // namespace kiln
