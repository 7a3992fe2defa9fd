// Pooling: max (with indices saved for backward), average, adaptive average. x (N, C, H, W). 16-bit
// max pool runs directly on the CPU, on channels-last x too (kernels/cpu/pool_nhwc.h: y, the indices and dx
// channels-last, no NCHW copies); the other 16-bit pools (and max pool on CUDA) stage through f32, and other
// channels-last pools run in NCHW through copies.
#include "engine/core/meta_target.h"
#include "engine/ops/nn_common.h"
#include "engine/ops/op_trace.h"
#include "kernels/common/nn_check.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/pool_nhwc.h"

namespace kiln {
namespace {

Pool2dDesc pool_desc(const Tensor& x, std::vector<int64_t> k, std::vector<int64_t> s, std::vector<int64_t> p,
                     std::vector<int64_t> dil, bool ceil_mode, const char* op) {
  KILN_CHECK(x.dim() == 4, op, ": input must be 4-D (N, C, H, W), got ", x.str());
  k = expand_pair(k, op, "kernel_size");
  s = s.empty() ? k : expand_pair(s, op, "stride");
  p = expand_pair(p, op, "padding");
  dil = expand_pair(dil, op, "dilation");
  Pool2dDesc d;
  d.N = x.size(0), d.C = x.size(1), d.H = x.size(2), d.W = x.size(3);
  d.kh = k[0], d.kw = k[1], d.stride_h = s[0], d.stride_w = s[1], d.pad_h = p[0], d.pad_w = p[1];
  d.dil_h = dil[0], d.dil_w = dil[1], d.ceil_mode = ceil_mode;
  pool2d_check(d, op);
  KILN_CHECK(d.out_h() > 0 && d.out_w() > 0, op, ": input ", x.str(), " is too small for kernel ", d.kh, "x", d.kw);
  return d;
}

// Max pool on a 16-bit x on the CPU (or on meta imitating the CPU: the same allocations, no kernels): the
// kernels compare in f32 and store the 16-bit winner, the bits of the f32-staged path (x copied to f32, the
// f32 op, y rounded back; dx the f32 sum rounded) without its copies (x32, y32 in the forward; dy32, dx32 in
// the backward). The indices are made before y: the staged path (the cuda plan's) makes them before its
// rounded y, so both targets' requests differ by exactly those copies (tests/unit/test_cuda_plan_diff.cpp).
Tensor max_pool2d_cpu_16(const Tensor& x, const Pool2dDesc& d) {
  const Device dev = x.device();
  const DType xdt = x.dtype();
  Tensor xc = contiguous(x.detach());
  Tensor idx = empty({d.N, d.C, d.out_h(), d.out_w()}, DType::i64, dev);
  Tensor y = empty({d.N, d.C, d.out_h(), d.out_w()}, xdt, dev);
  if (dev.is_cpu()) {
    OpSpanScope span("max_pool2d_forward_16");
    if (xdt == DType::bf16)
      cpu::max_pool2d_forward<bfloat16>(d, ptr<bfloat16>(xc), ptr<bfloat16>(y), ptr<int64_t>(idx));
    else
      cpu::max_pool2d_forward<half>(d, ptr<half>(xc), ptr<half>(y), ptr<int64_t>(idx));
  }
  auto node = record_op("max_pool2d", {x}, {y}, [d, xdt](FunctionNode& n, const std::vector<Tensor>& g) {
    Tensor idx = n.saved(0);
    // dy in x's dtype (another dtype is rounded to it: the staged path would round its f32 dx the same way
    // only when dy is x's dtype, so a gradient of another dtype is computed in f32 as before)
    if (g[0].dtype() != xdt) {
      Tensor dy = contiguous(to_dtype(g[0], DType::f32));
      Tensor dx = empty({d.N, d.C, d.H, d.W}, DType::f32, dy.device());
      if (d.N > 0 && dy.device().is_cpu())
        cpu::max_pool2d_backward<float>(d, ptr<float>(dy), ptr<int64_t>(idx), ptr<float>(dx));
      return std::vector<Tensor>{to_dtype(dx, xdt)};
    }
    Tensor dy = contiguous(g[0]);
    Tensor dx = empty({d.N, d.C, d.H, d.W}, xdt, dy.device());
    if (d.N == 0 || !dy.device().is_cpu()) return std::vector<Tensor>{dx};  // no sample, or meta: no kernel
    OpSpanScope span("max_pool2d_backward_16");
    if (xdt == DType::bf16)
      cpu::max_pool2d_backward<bfloat16>(d, ptr<bfloat16>(dy), ptr<int64_t>(idx), ptr<bfloat16>(dx));
    else
      cpu::max_pool2d_backward<half>(d, ptr<half>(dy), ptr<int64_t>(idx), ptr<half>(dx));
    return std::vector<Tensor>{dx};
  });
  if (node) node->save(idx);
  return y;
}

// Max pool on a channels-last 16-bit x on the CPU (or on meta imitating the CPU): x, y, the indices (i64) and
// dx all channels-last, the NCHW kernels' values and bits (pool_nhwc.h). A gradient of another dtype than
// x's is computed in f32 and rounded, as max_pool2d_cpu_16.
Tensor max_pool2d_cpu_16_nhwc(const Tensor& x, const Pool2dDesc& d) {
  const Device dev = x.device();
  const DType xdt = x.dtype();
  const MemoryFormat cl = MemoryFormat::channels_last;
  Tensor xc = contiguous(x.detach(), cl);
  Tensor idx = empty({d.N, d.C, d.out_h(), d.out_w()}, DType::i64, dev, cl);
  Tensor y = empty({d.N, d.C, d.out_h(), d.out_w()}, xdt, dev, cl);
  if (dev.is_cpu() && d.N > 0) {
    OpSpanScope span("max_pool2d_forward_16");
    if (xdt == DType::bf16)
      cpu::max_pool2d_forward_nhwc<bfloat16>(d, ptr<bfloat16>(xc), ptr<bfloat16>(y), ptr<int64_t>(idx));
    else
      cpu::max_pool2d_forward_nhwc<half>(d, ptr<half>(xc), ptr<half>(y), ptr<int64_t>(idx));
  }
  auto node = record_op("max_pool2d", {x}, {y}, [d, xdt, cl](FunctionNode& n, const std::vector<Tensor>& g) {
    Tensor idx = n.saved(0);
    const bool same = g[0].dtype() == xdt;
    const DType gdt = same ? xdt : DType::f32;
    Tensor dy = contiguous(same ? g[0] : to_dtype(g[0], DType::f32), cl);
    Tensor dx = empty({d.N, d.C, d.H, d.W}, gdt, dy.device(), cl);
    if (d.N > 0 && dy.device().is_cpu()) {
      OpSpanScope span("max_pool2d_backward_16");
      if (gdt == DType::f32)
        cpu::max_pool2d_backward_nhwc<float>(d, ptr<float>(dy), ptr<int64_t>(idx), ptr<float>(dx));
      else if (gdt == DType::bf16)
        cpu::max_pool2d_backward_nhwc<bfloat16>(d, ptr<bfloat16>(dy), ptr<int64_t>(idx), ptr<bfloat16>(dx));
      else
        cpu::max_pool2d_backward_nhwc<half>(d, ptr<half>(dy), ptr<int64_t>(idx), ptr<half>(dx));
    }
    return std::vector<Tensor>{same ? dx : to_dtype(dx, xdt)};
  });
  if (node) node->save(idx);
  return y;
}

}  // namespace

Tensor max_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, std::vector<int64_t> dilation, bool ceil_mode) {
  check_defined(x, "max_pool2d", "input");
  if (suggest_memory_format(x) == MemoryFormat::channels_last && is_16bit(x.dtype()) &&
      (x.device().is_cpu() || (x.device().is_meta() && !meta_target().is_cuda())))
    return max_pool2d_cpu_16_nhwc(x, pool_desc(x, kernel, stride, padding, dilation, ceil_mode, "max_pool2d"));
  if (suggest_memory_format(x) == MemoryFormat::channels_last)  // no NHWC pooling kernel here: pool in NCHW and give the output back channels-last
    return contiguous(max_pool2d(contiguous(x), kernel, stride, padding, dilation, ceil_mode),
                      MemoryFormat::channels_last);
  if (is_16bit(x.dtype())) {
    if (x.device().is_cpu() || (x.device().is_meta() && !meta_target().is_cuda()))
      return max_pool2d_cpu_16(x, pool_desc(x, kernel, stride, padding, dilation, ceil_mode, "max_pool2d"));
    // CUDA (and meta imitating it) stages through f32
    return to_dtype(max_pool2d(to_dtype(x, DType::f32), kernel, stride, padding, dilation, ceil_mode), x.dtype());
  }
  Pool2dDesc d = pool_desc(x, kernel, stride, padding, dilation, ceil_mode, "max_pool2d");
  Tensor xc = contiguous(x.detach());
  Tensor y = empty({d.N, d.C, d.out_h(), d.out_w()}, x.dtype(), x.device());
  Tensor idx = empty(y.sizes(), DType::i64, x.device());
  KILN_NN_TYPED(x.dtype(), "max_pool2d",
                KILN_DISPATCH(x.device(), max_pool2d_forward<T>, d, ptr<T>(xc), ptr<T>(y), ptr<int64_t>(idx)));
  auto node = record_op("max_pool2d", {x}, {y}, [d](FunctionNode& n, const std::vector<Tensor>& g) {
    Tensor idx = n.saved(0);
    Tensor dy = contiguous(g[0]);
    Tensor dx = empty({d.N, d.C, d.H, d.W}, dy.dtype(), dy.device());
    if (d.N == 0) return std::vector<Tensor>{dx};  // no sample (a data-parallel rank without rows): no indices
    KILN_NN_TYPED(dy.dtype(), "max_pool2d backward",
                  KILN_DISPATCH(dy.device(), max_pool2d_backward<T>, d, ptr<T>(dy), ptr<int64_t>(idx), ptr<T>(dx)));
    return std::vector<Tensor>{dx};
  });
  if (node) node->save(idx);
  return y;
}

Tensor avg_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad) {
  check_defined(x, "avg_pool2d", "input");
  if (suggest_memory_format(x) == MemoryFormat::channels_last)  // as max_pool2d
    return contiguous(avg_pool2d(contiguous(x), kernel, stride, padding, ceil_mode, count_include_pad),
                      MemoryFormat::channels_last);
  if (is_16bit(x.dtype()))
    return to_dtype(avg_pool2d(to_dtype(x, DType::f32), kernel, stride, padding, ceil_mode, count_include_pad),
                    x.dtype());
  Pool2dDesc d = pool_desc(x, kernel, stride, padding, {1, 1}, ceil_mode, "avg_pool2d");
  Tensor xc = contiguous(x.detach());
  Tensor y = empty({d.N, d.C, d.out_h(), d.out_w()}, x.dtype(), x.device());
  KILN_NN_TYPED(x.dtype(), "avg_pool2d",
                KILN_DISPATCH(x.device(), avg_pool2d_forward<T>, d, count_include_pad, ptr<T>(xc), ptr<T>(y)));
  record_op("avg_pool2d", {x}, {y}, [d, count_include_pad](FunctionNode&, const std::vector<Tensor>& g) {
    Tensor dy = contiguous(g[0]);
    Tensor dx = empty({d.N, d.C, d.H, d.W}, dy.dtype(), dy.device());
    KILN_NN_TYPED(dy.dtype(), "avg_pool2d backward",
                  KILN_DISPATCH(dy.device(), avg_pool2d_backward<T>, d, count_include_pad, ptr<T>(dy), ptr<T>(dx)));
    return std::vector<Tensor>{dx};
  });
  return y;
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::vector<int64_t> output_size) {
  check_defined(x, "adaptive_avg_pool2d", "input");
  if (suggest_memory_format(x) == MemoryFormat::channels_last)  // as max_pool2d
    return contiguous(adaptive_avg_pool2d(contiguous(x), output_size), MemoryFormat::channels_last);
  if (is_16bit(x.dtype())) return to_dtype(adaptive_avg_pool2d(to_dtype(x, DType::f32), output_size), x.dtype());
  KILN_CHECK(x.dim() == 4, "adaptive_avg_pool2d: input must be 4-D (N, C, H, W), got ", x.str());
  auto os = expand_pair(output_size, "adaptive_avg_pool2d", "output_size");
  KILN_CHECK(os[0] > 0 && os[1] > 0, "adaptive_avg_pool2d: output size must be positive");
  int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), OH = os[0], OW = os[1];
  KILN_CHECK(H > 0 && W > 0, "adaptive_avg_pool2d: empty input ", x.str());
  Tensor xc = contiguous(x.detach());
  Tensor y = empty({N, C, OH, OW}, x.dtype(), x.device());
  KILN_NN_TYPED(x.dtype(), "adaptive_avg_pool2d",
                KILN_DISPATCH(x.device(), adaptive_avg_pool2d_forward<T>, N, C, H, W, OH, OW, ptr<T>(xc), ptr<T>(y)));
  record_op("adaptive_avg_pool2d", {x}, {y}, [=](FunctionNode&, const std::vector<Tensor>& g) {
    Tensor dy = contiguous(g[0]);
    Tensor dx = empty({N, C, H, W}, dy.dtype(), dy.device());
    KILN_NN_TYPED(dy.dtype(), "adaptive_avg_pool2d backward",
                  KILN_DISPATCH(dy.device(), adaptive_avg_pool2d_backward<T>, N, C, H, W, OH, OW, ptr<T>(dy),
                                ptr<T>(dx)));
    return std::vector<Tensor>{dx};
  });
  return y;
}

}  // namespace kiln
