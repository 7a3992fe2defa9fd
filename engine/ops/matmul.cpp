// matmul (1-D, 2-D, batched with broadcasting) and linear. A transposed operand is passed to
// GEMM with a transpose flag instead of being copied.
// bf16 on the CPU (and on meta imitating it) takes oneDNN's matrix-unit matmul when
// cpu::matmul_bf16_uses_onednn (kernels/cpu/matmul_bf16.h: AMX or AVX512-BF16): A, B, C stay bf16 (no f32
// staging), and oneDNN's scratchpad is a kiln workspace (tagged temporary), the same size on meta. Every
// product of the op goes through matmul_forward, so linear's forward, input and weight gradients all do.
#include "engine/core/meta_target.h"
#include "engine/ops/autocast.h"
#include "engine/ops/dispatch.h"
#include "engine/ops/nn_common.h"
#include "engine/ops/op_trace.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_bf16.h"

namespace kiln {
namespace {

struct GemmOperand {
  Tensor t;  // (B, r, c) view
  bool trans = false;
  int64_t ld = 0, batch_stride = 0;
};

GemmOperand gemm_operand(const Tensor& x3) {
  GemmOperand g;
  g.t = x3;
  int64_t r = x3.sizes()[1], c = x3.sizes()[2];
  const Shape& st = x3.strides();
  if ((st[2] == 1 || c == 1) && st[1] >= std::max<int64_t>(c, 1)) {
    g.ld = std::max<int64_t>(st[1], 1);
    if (r == 1) g.ld = std::max<int64_t>(c, 1);
  } else if ((st[1] == 1 || r == 1) && st[2] >= std::max<int64_t>(r, 1)) {
    g.trans = true;
    g.ld = std::max<int64_t>(st[2], 1);
    if (c == 1) g.ld = std::max<int64_t>(r, 1);
  } else {
    g.t = contiguous(x3);
    g.ld = std::max<int64_t>(c, 1);
  }
  g.batch_stride = g.t.sizes()[0] == 1 ? 0 : g.t.strides()[0];
  return g;
}

// a (..., n, k) @ b (..., k, m), both >= 2-D, no autograd.
Tensor matmul_forward(const Tensor& a, const Tensor& b) {
  int64_t n = a.sizes()[a.dim() - 2], k = a.sizes()[a.dim() - 1];
  int64_t k2 = b.sizes()[b.dim() - 2], m = b.sizes()[b.dim() - 1];
  KILN_CHECK(k == k2, "matmul: shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()),
             " cannot be multiplied (", k, " vs ", k2, ")");
  Shape ba(a.sizes().begin(), a.sizes().end() - 2), bb(b.sizes().begin(), b.sizes().end() - 2);
  Shape bs = broadcast_shapes(ba, bb, "matmul");
  int64_t batch = numel_of(bs);
  Shape ea = bs, eb = bs;
  ea.insert(ea.end(), {n, k});
  eb.insert(eb.end(), {k, m});
  Tensor a3 = reshape(expand(a.detach(), ea), {batch, n, k});
  Tensor b3 = reshape(expand(b.detach(), eb), {batch, k, m});
  Shape os = bs;
  os.insert(os.end(), {n, m});
  Tensor out = empty(os, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  if (k == 0) {
    launch_fill(out, 0.0);
    return out;
  }
  GemmOperand ga = gemm_operand(a3), gb = gemm_operand(b3);
  const Device dev = a.device();
  if (a.dtype() == DType::bf16 && (dev.is_cpu() || (dev.is_meta() && !meta_target().is_cuda()))) {
    cpu::MatmulBf16Desc d;
    d.batch = batch, d.M = n, d.N = m, d.K = k, d.trans_a = ga.trans, d.trans_b = gb.trans;
    d.lda = ga.ld, d.ldb = gb.ld, d.stride_a = ga.batch_stride, d.stride_b = gb.batch_stride;
    if (cpu::matmul_bf16_uses_onednn(d)) {
      Tensor ws = workspace(cpu::matmul_bf16_workspace_bytes(d), dev);
      if (dev.is_cpu()) {
        OpSpanScope span("matmul_bf16");
        cpu::matmul_bf16(d, ptr<bfloat16>(ga.t), ptr<bfloat16>(gb.t), ptr<bfloat16>(out), ws.data_ptr());
      }
      return out;
    }
  }
  KILN_DISPATCH(a.device(), gemm_strided, a.dtype(), ga.trans, gb.trans, n, m, k, 1.0, ga.t.data_ptr(), ga.ld,
                ga.batch_stride, gb.t.data_ptr(), gb.ld, gb.batch_stride, 0.0, out.data_ptr(), m, n * m, batch);
  return out;
}

Tensor matmul_nd(const Tensor& a, const Tensor& b) {
  Tensor out = matmul_forward(a, b);
  auto node = record_op("matmul", {a, b}, {out}, [](FunctionNode& nd, const std::vector<Tensor>& g) {
    Tensor a = nd.saved(0), b = nd.saved(1);
    std::vector<Tensor> r(2);
    if (nd.needs_input_grad(0)) r[0] = sum_to(matmul_forward(g[0], transpose(b, -1, -2)), a.sizes());
    if (nd.needs_input_grad(1)) {
      // 2-D b stored transposed (linear's transpose(w)): its gradient is computed transposed as well,
      // g^T a (m, k), and handed back as a view (k, m), so the transpose's backward gives the weight's own
      // contiguous layout and the leaf takes the buffer instead of copying it (no strided copy per step).
      const bool b_transposed = a.dim() == 2 && b.dim() == 2 && !b.is_contiguous() && b.strides()[0] == 1 &&
                                b.strides()[1] >= b.sizes()[0];
      r[1] = b_transposed ? transpose(matmul_forward(transpose(g[0], 0, 1), a), 0, 1)
                          : sum_to(matmul_forward(transpose(a, -1, -2), g[0]), b.sizes());
    }
    return r;
  });
  if (node) {
    node->save(a);
    node->save(b);
  }
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_defined(a, "matmul", "first operand");
  check_defined(b, "matmul", "second operand");
  if (autocast_enabled()) {  // lower-precision list
    using namespace autocast_detail;
    Tensor al = to_lower(a), bl = to_lower(b);
    Suspend off;
    return matmul(al, bl);
  }
  check_same_device(a, b, "matmul");
  check_same_dtype(a, b, "matmul");
  check_floating(a, "matmul");
  KILN_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least 1 dim, got ", a.str(), " and ",
             b.str());
  if (a.dim() == 1 && b.dim() == 1) return reshape(matmul_nd(unsqueeze(a, 0), unsqueeze(b, 1)), {});
  if (a.dim() == 1) return squeeze(matmul_nd(unsqueeze(a, 0), b), -2);
  if (b.dim() == 1) return squeeze(matmul_nd(a, unsqueeze(b, 1)), -1);
  return matmul_nd(a, b);
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  check_defined(x, "linear", "input");
  check_defined(w, "linear", "weight");
  if (autocast_enabled()) {  // lower-precision list
    using namespace autocast_detail;
    Tensor xl = to_lower(x), wl = to_lower(w), bl = to_lower(b);
    Suspend off;
    return linear(xl, wl, bl);
  }
  KILN_CHECK(w.dim() == 2, "linear: weight must be 2-D (out, in), got ", w.str());
  KILN_CHECK(x.dim() >= 1 && x.sizes().back() == w.sizes()[1], "linear: input ", x.str(), " has ",
             x.dim() ? x.sizes().back() : 0, " features but weight ", w.str(), " expects ", w.sizes()[1]);
  Tensor y = matmul(x, transpose(w, 0, 1));
  if (b.defined()) {
    KILN_CHECK(b.dim() == 1 && b.sizes()[0] == w.sizes()[0], "linear: bias ", b.str(), " does not match weight ",
               w.str());
    y = add(y, b);
  }
  return y;
}

}  // namespace kiln
