// conv2d: x (N, C, H, W), w (K, C/groups, R, S), b (K) -> y (N, K, OH, OW).
// f32/f64 on every device and 16-bit on the CPU: NCHW kernels (16-bit computes in f32 and rounds on
// store). 16-bit on cuda: conv2d_16.h (cuDNN or kiln's implicit GEMM, f32 accumulation), NCHW or
// channels-last; a channels-last input gives a channels-last output on cuda. Other devices take
// any layout through contiguous() and give NCHW.
// Workspace: the CPU kernels' im2col buffer. None on cuda (cuDNN takes its own per call from
// kiln's allocator, bounded by kernels/common/workspace_limit.h), and none in a meta run that
// imitates cuda (kiln mem --device cuda:N).
// A meta run that imitates cuda takes conv2d_cuda_16's path for 16-bit tensors, so a cuda plan
// replays the CUDA path's allocations (no f32 staging of x, w, b, y, dy, dx, dw) in every build;
// only the kernel calls (and cuDNN's workspace, a bound the plan states) are left out there.
// bf16 on the CPU (and on meta imitating it) takes oneDNN's matrix-unit kernels when
// cpu::conv2d_bf16_uses_onednn (kernels/cpu/conv2d_bf16.h: AMX or AVX512-BF16, groups 1): x and w
// stay bf16 (no f32 staging), and each pass's workspace (oneDNN's reorders and scratchpad) comes from
// kiln's allocator, the same sizes on meta. A channels-last input (suggest_memory_format) keeps x, y, dy and dx
// channels-last there (oneDNN on NHWC, cpu::Bf16Layout::nhwc: no NCHW copies) and gives a channels-last output,
// as on cuda; w and dw stay KCRS. bf16 with a reduction C*R*S below oneDNN's minimum (the small
// CNN's 1->32 conv1) runs kiln's direct kernel (kernels/cpu/conv2d_bf16_direct.h, cpu::conv2d_bf16_uses_direct):
// no workspace, no f32 copies. f16, and other bf16 shapes on the portable path, stage through f32.
#include "engine/core/meta_target.h"
#include "engine/ops/autocast.h"
#include "engine/ops/nn_common.h"
#include "kernels/common/nn_check.h"
#include "kernels/cpu/bias.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/common/cuda_backend.h"
#include "kernels/cpu/conv2d_bf16.h"
#include "kernels/cpu/conv2d_bf16_direct.h"

namespace kiln {

namespace {

size_t conv_workspace_bytes(const Conv2dDesc& d, DType dt, Device dev) {
  if (dev.is_cuda() || (dev.is_meta() && meta_target().is_cuda())) return 0;
  return cpu::conv2d_workspace_bytes(d, dtype_size(dt));
}

}  // namespace

namespace {

// True when a cuda device (or a meta run imitating one) runs this 16-bit convolution on kiln's
// implicit-GEMM kernels, which need NHWC; cuDNN otherwise (and always when no cuda backend is in
// force, a build without CUDA, where --kernels has no effect). Asks the cuda backend in force
// (kernels/common/cuda_backend.h: the real one, or the CPU execution mode in its tests).
bool conv16_uses_kiln(const Conv2dDesc& d, DType dt) {
  const CudaBackend* b = cuda_backend();
  return b && b->conv2d_16_uses_kiln(d, dt);
}

// True when a cuda device (or a meta run imitating one) adds the 16-bit conv bias and reduces its
// gradient with kiln's bias kernels (--kernels kiln, kernels/cuda/bias.cu): no f32 copy of dy. Else
// the generic broadcast add and an f32 sum (kiln's elementwise and reduction kernels).
bool bias_uses_kiln() {
  const CudaBackend* b = cuda_backend();
  return b && b->bias_uses_kiln();
}

bool imitates_cuda(Device dev) { return dev.is_cuda() || (dev.is_meta() && meta_target().is_cuda()); }

// 16-bit conv2d on a cuda device (or on meta imitating one: the same allocations, no kernels), x and w of dtype dt (checked by the caller). Runs in the layout
// the implementation wants: NHWC when the input is channels-last or kiln's kernels run (they need
// NHWC; an NCHW input is then copied in and the output copied back), else NCHW. Saves the 16-bit
// x and w in that layout. The bias is added and reduced here, not by the convolution kernels: kiln's
// bias kernels under --kernels kiln (bias_uses_kiln), else the generic add and an f32 sum.
Tensor conv2d_cuda_16(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dDesc& d) {
  const DType dt = x.dtype(), bdt = b.defined() ? b.dtype() : dt;
  const MemoryFormat in_fmt = suggest_memory_format(x);
  const bool nhwc = conv16_uses_kiln(d, dt) || in_fmt == MemoryFormat::channels_last;
  const MemoryFormat fmt = nhwc ? MemoryFormat::channels_last : MemoryFormat::contiguous;
  const bool back_to_nchw = nhwc && in_fmt == MemoryFormat::contiguous;
  const Device dev = x.device();
  // x: (N, C, H, W), w: (K, C/groups, R, S), both dense in fmt (KRSC for w when nhwc).
  Tensor xk = contiguous(x.detach(), fmt), wk = contiguous(w.detach(), fmt);
  Tensor y = empty({d.N, d.K, d.out_h(), d.out_w()}, dt, dev, fmt);
  if (cuda_backend()) {  // a backend exists (a CUDA build, or the CPU mode's tests); else nothing to trace
    OpSpanScope span("conv2d_16_forward");  // on meta too, as KILN_DISPATCH's spans (the op trace's inventory)
    if (dev.is_cuda()) cuda_backend()->conv2d_16_forward(d, dt, nhwc, xk.data_ptr(), wk.data_ptr(), y.data_ptr());
  }
  // y as (outer, K, inner) for the bias kernels: NCHW (N, K, OH*OW), NHWC (N*OH*OW, K, 1).
  const int64_t bias_outer = nhwc ? d.N * d.out_h() * d.out_w() : d.N, bias_inner = nhwc ? 1 : d.out_h() * d.out_w();
  const bool kiln_bias = b.defined() && bias_uses_kiln();
  if (kiln_bias) {
    Tensor bk = contiguous(to_dtype(b.detach(), dt));  // (K)
    KILN_DISPATCH(dev, bias_add, dt, bias_outer, d.K, bias_inner, y.data_ptr(), bk.data_ptr());
  } else if (b.defined()) {
    launch_binary(BinaryOp::add, y, y, reshape(to_dtype(b.detach(), dt), {1, d.K, 1, 1}));
  }
  if (back_to_nchw) y = contiguous(y);
  const bool has_bias = b.defined();
  auto node = record_op("conv2d", {x, w, b}, {y}, [d, dt, bdt, fmt, nhwc, back_to_nchw, has_bias, kiln_bias, bias_outer,
                                                   bias_inner](FunctionNode& n, const std::vector<Tensor>& g) {
    Tensor xs = n.saved(0), ws = n.saved(1);
    Tensor dy = contiguous(to_dtype(g[0], dt), fmt);  // (N, K, P, Q) in the compute layout
    std::vector<Tensor> r(3);
    const bool on_gpu = xs.device().is_cuda();
    if (n.needs_input_grad(0)) {
      Tensor dx = empty(xs.sizes(), dt, xs.device(), fmt);
      if (cuda_backend()) {
        OpSpanScope span("conv2d_16_backward_input");
        if (on_gpu) cuda_backend()->conv2d_16_backward_input(d, dt, nhwc, dy.data_ptr(), ws.data_ptr(), dx.data_ptr());
      }
      r[0] = back_to_nchw ? contiguous(dx) : dx;
    }
    if (n.needs_input_grad(1)) {
      Tensor dw = empty(ws.sizes(), dt, ws.device(), fmt);
      if (cuda_backend()) {
        OpSpanScope span("conv2d_16_backward_weight");
        if (on_gpu) cuda_backend()->conv2d_16_backward_weight(d, dt, nhwc, xs.data_ptr(), dy.data_ptr(), dw.data_ptr());
      }
      r[1] = contiguous(dw);  // parameters and their gradients stay row-major
    }
    (void)on_gpu;
    if (kiln_bias && n.needs_input_grad(2)) {
      Tensor db = empty({d.K}, dt, xs.device());  // f32 accumulation inside the kernel, stored in dt
      KILN_DISPATCH(xs.device(), bias_grad, dt, bias_outer, d.K, bias_inner, dy.data_ptr(), db.data_ptr());
      r[2] = to_dtype(db, bdt);
    } else if (has_bias && n.needs_input_grad(2)) {
      r[2] = to_dtype(sum(to_dtype(dy, DType::f32), {0, 2, 3}), bdt);
    }
    return r;
  });
  if (node) {
    node->save(xk);
    node->save(wk);
  }
  return y;
}

// bf16 conv2d on the CPU through oneDNN (or on meta imitating the CPU: the same allocations, no
// kernels). x, w: bf16; b: bf16 or f32 (its gradient has its dtype). Saves the bf16 x and w. x, y, dy, dx are
// NCHW, or NHWC when x is channels-last (suggest_memory_format): then y is channels-last too.
Tensor conv2d_cpu_bf16(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dDesc& d) {
  using cpu::Bf16Bias;
  using cpu::Bf16Layout;
  using cpu::Conv2dPass;
  const MemoryFormat fmt = suggest_memory_format(x);
  const Bf16Layout layout = fmt == MemoryFormat::channels_last ? Bf16Layout::nhwc : Bf16Layout::nchw;
  const Device dev = x.device();
  const bool run = dev.is_cpu();
  const DType bdt = b.defined() ? b.dtype() : DType::bf16;
  KILN_CHECK(!b.defined() || b.dtype() == DType::bf16 || b.dtype() == DType::f32, "conv2d: bias ", b.str(),
             " must be bf16 or f32 with a bf16 input");
  const Bf16Bias bt = !b.defined() ? Bf16Bias::none : bdt == DType::f32 ? Bf16Bias::f32 : Bf16Bias::bf16;
  // x: (N, C, H, W) dense in fmt, w: (K, C, R, S), b: (K), contiguous, all bf16 (b bf16 or f32)
  Tensor xc = contiguous(x.detach(), fmt), wc = contiguous(w.detach());
  Tensor bc = b.defined() ? contiguous(b.detach()) : Tensor();
  Tensor y = empty({d.N, d.K, d.out_h(), d.out_w()}, DType::bf16, dev, fmt);
  {
    Tensor ws = workspace(cpu::conv2d_bf16_workspace_bytes(d, Conv2dPass::forward, bt, layout), dev);
    if (run) {
      OpSpanScope span("conv2d_bf16_forward");
      cpu::conv2d_bf16_forward(d, ptr<bfloat16>(xc), ptr<bfloat16>(wc), bc.defined() ? bc.data_ptr() : nullptr, bt,
                               ptr<bfloat16>(y), ws.data_ptr(), layout);
    }
  }
  auto node = record_op("conv2d", {x, w, b}, {y}, [d, bt, bdt, fmt, layout](FunctionNode& n,
                                                                             const std::vector<Tensor>& g) {
    Tensor xs = n.saved(0), ws_ = n.saved(1);
    Tensor dy = contiguous(to_dtype(g[0], DType::bf16), fmt);  // (N, K, OH, OW) dense in fmt
    const Device dev = xs.device();
    const bool run = dev.is_cpu();
    const bool need_dx = n.needs_input_grad(0), need_dw = n.needs_input_grad(1) || n.needs_input_grad(2);
    const Bf16Bias dbt = n.needs_input_grad(2) ? bt : Bf16Bias::none;
    // The weight gradient stages through f32 where the rule says so (cpu::conv2d_bf16_wgrad: above one thread,
    // fewer than 32 output channels with short reductions N*OH*OW or one image); otherwise oneDNN's, above one
    // thread split between the threads by output channel or by image (the workspace holds every thread's
    // reorders and scratchpad, and for the image split its f32 partial: conv2d_bf16_workspace_bytes).
    const bool dw_onednn = cpu::conv2d_bf16_pass_uses_onednn(d, Conv2dPass::backward_weight, layout);
    // One workspace for both passes, as the f32 path: the larger of the two.
    size_t bytes = 0;
    if (need_dx) bytes = cpu::conv2d_bf16_workspace_bytes(d, Conv2dPass::backward_input, Bf16Bias::none, layout);
    if (need_dw)
      bytes = std::max(bytes, dw_onednn ? cpu::conv2d_bf16_workspace_bytes(d, Conv2dPass::backward_weight, dbt, layout)
                                        : cpu::conv2d_workspace_bytes(d, sizeof(float)));
    Tensor ws = workspace(bytes, dev);
    std::vector<Tensor> r(3);
    if (need_dx) {
      Tensor dx = empty(xs.sizes(), DType::bf16, dev, fmt);
      if (run) {
        OpSpanScope span("conv2d_bf16_backward_input");
        cpu::conv2d_bf16_backward_input(d, ptr<bfloat16>(dy), ptr<bfloat16>(ws_), ptr<bfloat16>(dx), ws.data_ptr(),
                                        layout);
      }
      r[0] = dx;
    }
    if (need_dw && !dw_onednn) {
      // x, dy: f32 NCHW copies (kiln's f32 kernel reads NCHW; to_dtype keeps a channels-last input
      // channels-last, so those are made NCHW first); dw, db computed in f32 and rounded to their dtypes.
      Tensor xf = to_dtype(contiguous(xs), DType::f32), dyf = to_dtype(contiguous(dy), DType::f32);
      Tensor dwf = empty(ws_.sizes(), DType::f32, dev);
      Tensor dbf = dbt != Bf16Bias::none ? empty({d.K}, DType::f32, dev) : Tensor();
      if (run) {
        OpSpanScope span("conv2d_backward_weight");
        cpu::conv2d_backward_weight<float>(d, ptr<float>(xf), ptr<float>(dyf), ptr<float>(dwf), ptr<float>(dbf),
                                           ws.data_ptr());
      }
      r[1] = to_dtype(dwf, DType::bf16);
      r[2] = dbf.defined() ? to_dtype(dbf, bdt) : Tensor();
    } else if (need_dw) {
      Tensor dw = empty(ws_.sizes(), DType::bf16, dev);
      Tensor db = dbt != Bf16Bias::none ? empty({d.K}, bdt, dev) : Tensor();
      if (run) {
        OpSpanScope span("conv2d_bf16_backward_weight");
        cpu::conv2d_bf16_backward_weight(d, ptr<bfloat16>(xs), ptr<bfloat16>(dy), ptr<bfloat16>(dw),
                                         db.defined() ? db.data_ptr() : nullptr, dbt, ws.data_ptr(), layout);
      }
      r[1] = dw;
      r[2] = db;
    }
    return r;
  });
  if (node) {
    node->save(xc);
    node->save(wc);
  }
  return y;
}

// bf16 conv2d on the CPU by kiln's direct kernel (or on meta imitating the CPU: the same allocations, no
// kernels): x, w bf16; b bf16 or f32 (its gradient has its dtype). No workspace and no f32 copies; saves the
// bf16 x and w. The input gradient is computed only when x needs it (not for a first layer on the data).
Tensor conv2d_cpu_bf16_direct(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dDesc& d) {
  using cpu::Bf16Bias;
  const Device dev = x.device();
  const bool run = dev.is_cpu();
  const DType bdt = b.defined() ? b.dtype() : DType::bf16;
  KILN_CHECK(!b.defined() || b.dtype() == DType::bf16 || b.dtype() == DType::f32, "conv2d: bias ", b.str(),
             " must be bf16 or f32 with a bf16 input");
  const Bf16Bias bt = !b.defined() ? Bf16Bias::none : bdt == DType::f32 ? Bf16Bias::f32 : Bf16Bias::bf16;
  // x: (N, C, H, W), w: (K, C, R, S), b: (K), all contiguous bf16 (b bf16 or f32)
  Tensor xc = contiguous(x.detach()), wc = contiguous(w.detach());
  Tensor bc = b.defined() ? contiguous(b.detach()) : Tensor();
  Tensor y = empty({d.N, d.K, d.out_h(), d.out_w()}, DType::bf16, dev);
  if (run) {
    OpSpanScope span("conv2d_bf16_direct_forward");
    cpu::conv2d_bf16_direct_forward(d, ptr<bfloat16>(xc), ptr<bfloat16>(wc), bc.defined() ? bc.data_ptr() : nullptr,
                                    bt, ptr<bfloat16>(y));
  }
  auto node = record_op("conv2d", {x, w, b}, {y}, [d, bt, bdt](FunctionNode& n, const std::vector<Tensor>& g) {
    Tensor xs = n.saved(0), ws = n.saved(1);
    Tensor dy = contiguous(to_dtype(g[0], DType::bf16));  // (N, K, OH, OW)
    const Device dev = xs.device();
    const bool run = dev.is_cpu();
    const Bf16Bias dbt = n.needs_input_grad(2) ? bt : Bf16Bias::none;
    std::vector<Tensor> r(3);
    if (n.needs_input_grad(0)) {
      Tensor dx = empty(xs.sizes(), DType::bf16, dev);
      if (run) {
        OpSpanScope span("conv2d_bf16_direct_backward_input");
        cpu::conv2d_bf16_direct_backward_input(d, ptr<bfloat16>(dy), ptr<bfloat16>(ws), ptr<bfloat16>(dx));
      }
      r[0] = dx;
    }
    if (n.needs_input_grad(1) || n.needs_input_grad(2)) {
      Tensor dw = empty(ws.sizes(), DType::bf16, dev);
      Tensor db = dbt != Bf16Bias::none ? empty({d.K}, bdt, dev) : Tensor();
      if (run) {
        OpSpanScope span("conv2d_bf16_direct_backward_weight");
        cpu::conv2d_bf16_direct_backward_weight(d, ptr<bfloat16>(xs), ptr<bfloat16>(dy), ptr<bfloat16>(dw),
                                                db.defined() ? db.data_ptr() : nullptr, dbt);
      }
      r[1] = dw;
      r[2] = db;
    }
    return r;
  });
  if (node) {
    node->save(xc);
    node->save(wc);
  }
  return y;
}

}  // namespace

std::vector<int64_t> expand_pair(const std::vector<int64_t>& v, const char* op, const char* what) {
  KILN_CHECK(v.size() == 1 || v.size() == 2, op, ": ", what, " needs 1 or 2 values, got ", v.size());
  return v.size() == 1 ? std::vector<int64_t>{v[0], v[0]} : v;
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, std::vector<int64_t> stride,
              std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups) {
  check_defined(x, "conv2d", "input");
  check_defined(w, "conv2d", "weight");
  if (autocast_enabled()) {  // lower-precision list
    using namespace autocast_detail;
    Tensor xl = to_lower(x), wl = to_lower(w), bl = to_lower(b);
    Suspend off;
    return conv2d(xl, wl, bl, stride, padding, dilation, groups);
  }
  check_same_dtype(x, w, "conv2d");
  check_same_device(x, w, "conv2d");
  KILN_CHECK(x.dim() == 4, "conv2d: input must be 4-D (N, C, H, W), got ", x.str());
  KILN_CHECK(w.dim() == 4, "conv2d: weight must be 4-D (K, C/groups, R, S), got ", w.str());
  stride = expand_pair(stride, "conv2d", "stride");
  padding = expand_pair(padding, "conv2d", "padding");
  dilation = expand_pair(dilation, "conv2d", "dilation");
  Conv2dDesc d;
  d.N = x.size(0), d.C = x.size(1), d.H = x.size(2), d.W = x.size(3);
  d.K = w.size(0), d.R = w.size(2), d.S = w.size(3);
  d.stride_h = stride[0], d.stride_w = stride[1], d.pad_h = padding[0], d.pad_w = padding[1];
  d.dil_h = dilation[0], d.dil_w = dilation[1], d.groups = groups;
  KILN_CHECK(groups >= 1 && d.C % groups == 0 && d.K % groups == 0, "conv2d: groups ", groups,
             " must divide input channels ", d.C, " and output channels ", d.K);
  KILN_CHECK(w.size(1) * groups == d.C, "conv2d: weight ", w.str(), " expects ", w.size(1) * groups,
             " input channels but input ", x.str(), " has ", d.C);
  if (b.defined())
    KILN_CHECK(b.dim() == 1 && b.size(0) == d.K, "conv2d: bias ", b.str(), " does not match ", d.K, " output channels");
  if (b.defined() && !is_16bit(x.dtype())) check_same_dtype(x, b, "conv2d");
  KILN_CHECK(d.out_h() > 0 && d.out_w() > 0, "conv2d: input ", x.str(), " is too small for kernel ", d.R, "x", d.S,
             " with padding ", d.pad_h, ",", d.pad_w, " and dilation ", d.dil_h, ",", d.dil_w);
  conv2d_check(d, "conv2d");
  if (imitates_cuda(x.device()) && is_16bit(x.dtype())) return conv2d_cuda_16(x, w, b, d);
  if (x.dtype() == DType::bf16 && cpu::conv2d_bf16_uses_direct(d)) return conv2d_cpu_bf16_direct(x, w, b, d);
  if (x.dtype() == DType::bf16 && cpu::conv2d_bf16_uses_onednn(d)) return conv2d_cpu_bf16(x, w, b, d);
  // 16-bit tensors compute in f32 and round on store (kiln's CPU rule); what is saved for
  // backward stays 16-bit, so --amp halves the activations conv keeps.
  const bool half = is_16bit(x.dtype());
  const DType xdt = x.dtype(), bdt = b.defined() ? b.dtype() : x.dtype();
  auto compute = [half](const Tensor& t) { return half && t.defined() ? to_dtype(t, DType::f32) : t; };
  Tensor xc = contiguous(x.detach()), wc = contiguous(w.detach());
  Tensor bc = b.defined() ? contiguous(b.detach()) : Tensor();
  Tensor y;
  {
    Tensor xk = compute(xc), wk = compute(wc), bk = compute(bc);
    Tensor yk = empty({d.N, d.K, d.out_h(), d.out_w()}, xk.dtype(), x.device());
    Tensor ws = workspace(conv_workspace_bytes(d, xk.dtype(), x.device()), x.device());
    KILN_NN_TYPED(xk.dtype(), "conv2d",
                  KILN_DISPATCH(x.device(), conv2d_forward<T>, d, ptr<T>(xk), ptr<T>(wk), ptr<T>(bk), ptr<T>(yk),
                                ws.data_ptr()));
    y = half ? to_dtype(yk, xdt) : yk;
  }
  bool has_bias = b.defined();
  auto node = record_op("conv2d", {x, w, b}, {y}, [d, has_bias, half, xdt, bdt, compute](FunctionNode& n,
                                                                                      const std::vector<Tensor>& g) {
    Tensor x = compute(n.saved(0)), w = compute(n.saved(1));
    Tensor dy = contiguous(compute(g[0]));
    auto back = [half](const Tensor& t, DType dt) { return half && t.defined() ? to_dtype(t, dt) : t; };
    std::vector<Tensor> r(3);
    Tensor ws = workspace(conv_workspace_bytes(d, x.dtype(), x.device()), x.device());
    if (n.needs_input_grad(0)) {
      Tensor dx = empty(x.sizes(), x.dtype(), x.device());
      KILN_NN_TYPED(x.dtype(), "conv2d backward",
                    KILN_DISPATCH(x.device(), conv2d_backward_input<T>, d, ptr<T>(dy), ptr<T>(w), ptr<T>(dx),
                                  ws.data_ptr()));
      r[0] = back(dx, xdt);
    }
    if (n.needs_input_grad(1) || n.needs_input_grad(2)) {
      Tensor dw = empty(w.sizes(), w.dtype(), w.device());
      Tensor db = has_bias ? empty({d.K}, w.dtype(), w.device()) : Tensor();
      KILN_NN_TYPED(x.dtype(), "conv2d backward",
                    KILN_DISPATCH(x.device(), conv2d_backward_weight<T>, d, ptr<T>(x), ptr<T>(dy), ptr<T>(dw),
                                  ptr<T>(db), ws.data_ptr()));
      r[1] = back(dw, xdt);
      r[2] = back(db, bdt);
    }
    return r;
  });
  if (node) {
    node->save(xc);
    node->save(wc);
  }
  return y;
}

}  // namespace kiln
