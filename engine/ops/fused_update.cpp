// Fused optimizer updates, dispatched by device (see fused_update.h).
#include "engine/ops/fused_update.h"

#include <optional>

#include "engine/ops/dispatch.h"
#include "kernels/cpu/optim_update.h"
#include "kernels/common/cuda_backend.h"

namespace kiln {

namespace {

void check_operand(const char* op, const Tensor& p, const Tensor& t, const char* what) {
  KILN_CHECK(t.defined() && t.dtype() == DType::f32 && t.is_contiguous() && t.numel() == p.numel() &&
                 t.device() == p.device(),
             op, ": ", what, " ", t.defined() ? t.str() : "(undefined)", " must be a contiguous f32 tensor of ",
             p.numel(), " elements on ", p.device().str());
}

}  // namespace

void sgd_fused_(Tensor& p, const Tensor& g, Tensor* buf, bool first_step, const optim::SgdParams& h) {
  check_operand("sgd_fused_", p, p, "parameter");
  check_operand("sgd_fused_", p, g, "gradient");
  if (buf) check_operand("sgd_fused_", p, *buf, "momentum buffer");
  if (p.device().is_meta()) {  // no data, nothing to update; the span names the call as KILN_DISPATCH's do
    OpSpanScope span("sgd_fused");
    return;
  }
  float* pp = p.data<float>();
  const float* gp = g.data<float>();
  float* bp = buf ? buf->data<float>() : nullptr;
  const int64_t n = p.numel();
  {
    std::optional<CudaDeviceScope> dg;  // a parameter on another GPU than the current one
    if (p.device().is_cuda()) dg.emplace(p.device().index);
    KILN_DISPATCH(p.device(), sgd_fused, pp, gp, bp, n, first_step, h);
  }
  p.bump_version();
  if (bp) buf->bump_version();
}

void adamw_fused_(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const optim::AdamWParams& h) {
  check_operand("adamw_fused_", p, p, "parameter");
  check_operand("adamw_fused_", p, g, "gradient");
  check_operand("adamw_fused_", p, m, "exp_avg");
  check_operand("adamw_fused_", p, v, "exp_avg_sq");
  if (p.device().is_meta()) {  // no data, nothing to update; the span names the call as KILN_DISPATCH's do
    OpSpanScope span("adamw_fused");
    return;
  }
  float* pp = p.data<float>();
  const float* gp = g.data<float>();
  float* mp = m.data<float>();
  float* vp = v.data<float>();
  const int64_t n = p.numel();
  {
    std::optional<CudaDeviceScope> dg;  // a parameter on another GPU than the current one
    if (p.device().is_cuda()) dg.emplace(p.device().index);
    KILN_DISPATCH(p.device(), adamw_fused, pp, gp, mp, vp, n, h);
  }
  p.bump_version();
  m.bump_version();
  v.bump_version();
}

}  // namespace kiln
