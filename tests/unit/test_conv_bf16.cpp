// bf16 conv2d on the CPU (kernels/cpu/conv2d_bf16.h through engine/ops/nn_conv.cpp): each bf16 path
// (onednn amx, onednn avx512_bf16, portable f32 staging) forced in its own ctest case (oneDNN takes its ISA
// once per process, bf16_path.h), forward and both gradients against an f64 reference on shapes with
// stride 2, padding, dilation, N=1, odd sizes, 7x7 stems, 1x1; NaN/inf propagation; groups > 1 on the
// portable path; the AMX request's refusal giving the next lower level; and a bf16 conv forward+backward
// on the meta device making exactly the CPU run's allocation requests (sequence and peak) per path.
// Channels-last (oneDNN on NHWC, cpu::Bf16Layout::nhwc): forward and both gradients against the same f64
// bound and against the NCHW run, the outputs channels-last, at 1 and 2 threads with each weight-gradient
// way (im2col + matmul on NHWC included; by the rule at 2 threads on K 256 shapes: im2col + matmul and the
// channel split); meta == cpu requests for channels-last inputs (im2col + matmul at 2 threads included).
// The direct kernel (kernels/cpu/conv2d_bf16_direct.h: the small CNN's 1->32 conv1 by rule, every groups-1
// shape when forced): against f64, NaN/inf, the same bits at every ISA level and thread count, the rule and
// its override, its op-trace spans, and meta == cpu allocation requests.
// A case whose path this CPU (or build) lacks prints a SKIP line and passes; every case prints its path.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/core/error.h"
#include "engine/memory/allocator.h"
#include "engine/memory/tag.h"
#include "engine/ops/op_trace.h"
#include "engine/ops/ops.h"
#include "kernels/cpu/bf16_path.h"
#include "kernels/cpu/conv2d_bf16.h"
#include "kernels/cpu/conv2d_bf16_direct.h"
#include "kernels/cpu/conv2d_bf16_im2col.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/threads.h"
#include "support/cpu_paths.h"

using namespace kiln;
using kiln::test::IsaGuard;
using kiln::test::bf16_level_for;
using kiln::test::RequestRecorder;
using cpu::Bf16Path;
using cpu::CpuIsa;

namespace {

// Forces the bf16 weight gradient's algorithm for a scope (cpu::Bf16Wgrad::by_rule: the rule).
struct WgradGuard {
  explicit WgradGuard(cpu::Bf16Wgrad w) : old(cpu::set_bf16_wgrad_forced(w)) {}
  ~WgradGuard() { cpu::set_bf16_wgrad_forced(old); }
  cpu::Bf16Wgrad old;
};

struct Shape2 {
  Conv2dDesc d;
  int bias;  // 0 none, 1 f32, 2 bf16
};

Conv2dDesc desc(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t R, int64_t S, int64_t sh, int64_t sw,
                int64_t ph, int64_t pw, int64_t dh = 1, int64_t dw = 1, int64_t groups = 1) {
  Conv2dDesc d;
  d.N = N, d.C = C, d.H = H, d.W = W, d.K = K, d.R = R, d.S = S;
  d.stride_h = sh, d.stride_w = sw, d.pad_h = ph, d.pad_w = pw, d.dil_h = dh, d.dil_w = dw, d.groups = groups;
  return d;
}

std::vector<Shape2> shapes() {
  return {
      {desc(2, 5, 9, 7, 6, 3, 3, 1, 1, 1, 1), 1},        // odd sizes, padding, f32 bias
      {desc(1, 8, 11, 10, 4, 3, 3, 2, 2, 1, 1), 2},      // N = 1, stride 2, bf16 bias
      {desc(3, 3, 13, 13, 8, 7, 7, 2, 2, 3, 3), 0},      // a 3-channel 7x7 stride-2 stem
      {desc(2, 16, 6, 6, 16, 1, 1, 1, 1, 0, 0), 1},      // 1x1
      {desc(1, 7, 5, 9, 5, 2, 3, 1, 2, 0, 1, 2, 1), 0},  // rectangular kernel, dilation, mixed strides
      {desc(2, 32, 8, 8, 24, 3, 3, 1, 1, 1, 1), 2},      // ResNet-like 3x3
      // K >= 32: at 2 threads the weight gradient splits by output channel (conv2d_bf16_wgrad), parts of
      // whole 16-channel blocks: K 40 -> 16 + 24 (the last part takes K % 16), K 48 -> 32 + 16.
      {desc(2, 8, 7, 9, 40, 3, 3, 2, 1, 1, 1), 1},       // strided, f32 bias: dbias rows per part
      {desc(1, 16, 6, 5, 48, 1, 1, 1, 1, 0, 0), 2},      // N = 1, 1x1, bf16 bias
      // K 256 on NHWC at 2 threads (conv2d_bf16_wgrad): im2col + matmul on the small strided plane (2x2, its
      // im2col and matmul on both threads), the channel split where NCHW splits by image (x larger than dw's
      // f32 partial): by the rule in channels_last_case.
      {desc(2, 16, 4, 4, 256, 3, 3, 2, 2, 1, 1), 1},     // 2x2 output, stride 2, f32 bias
      {desc(2, 16, 17, 17, 256, 1, 1, 1, 1, 0, 0), 0},   // 1x1, N*OH*OW 578, N*H*W*2 1156 > K*R*S*4 1024
  };
}

// Random values exactly representable in bf16 (so only accumulation and output rounding differ).
std::vector<double> bf16_values(size_t n, std::mt19937& g) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<double> v(n);
  for (auto& x : v) x = (double)(float)bfloat16(u(g));
  return v;
}

// f64 reference of y, dx, dw, db and, per element, the sum of |terms| (for the accumulation bound).
struct Ref {
  std::vector<double> y, y_abs, dx, dx_abs, dw, dw_abs, db, db_abs;
};

Ref reference(const Conv2dDesc& d, const std::vector<double>& x, const std::vector<double>& w,
              const std::vector<double>& b, const std::vector<double>& dy) {
  const int64_t OH = d.out_h(), OW = d.out_w(), Cg = d.C / d.groups, Kg = d.K / d.groups;
  Ref r;
  r.y.assign(d.N * d.K * OH * OW, 0), r.y_abs = r.y;
  r.dx.assign(x.size(), 0), r.dx_abs = r.dx;
  r.dw.assign(w.size(), 0), r.dw_abs = r.dw;
  r.db.assign(d.K, 0), r.db_abs = r.db;
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t k = 0; k < d.K; ++k)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t yi = ((n * d.K + k) * OH + oh) * OW + ow;
          if (!b.empty()) r.y[yi] += b[k], r.y_abs[yi] += std::fabs(b[k]);
          r.db[k] += dy[yi], r.db_abs[k] += std::fabs(dy[yi]);
          for (int64_t cg = 0; cg < Cg; ++cg)
            for (int64_t rr = 0; rr < d.R; ++rr)
              for (int64_t s = 0; s < d.S; ++s) {
                const int64_t ih = oh * d.stride_h - d.pad_h + rr * d.dil_h, iw = ow * d.stride_w - d.pad_w + s * d.dil_w;
                if (ih < 0 || ih >= d.H || iw < 0 || iw >= d.W) continue;
                const int64_t c = (k / Kg) * Cg + cg;
                const int64_t xi = ((n * d.C + c) * d.H + ih) * d.W + iw, wi = ((k * Cg + cg) * d.R + rr) * d.S + s;
                r.y[yi] += x[xi] * w[wi], r.y_abs[yi] += std::fabs(x[xi] * w[wi]);
                r.dx[xi] += dy[yi] * w[wi], r.dx_abs[xi] += std::fabs(dy[yi] * w[wi]);
                r.dw[wi] += x[xi] * dy[yi], r.dw_abs[wi] += std::fabs(x[xi] * dy[yi]);
              }
        }
  return r;
}

// The bound: the kernels multiply bf16 values exactly in f32 (8-bit x 8-bit significands fit f32's 24),
// add L of them in f32 in some order (error <= L * 2^-24 * sum|terms| to first order; kiln's Winograd on the
// portable path adds a few transform operations per term: 2L covers both), then round once to the
// output type: |out - v| <= u_out * |v| with u_out = 2^-8 for bf16 (8-bit significand, round to nearest
// even) and 2^-24 for f32. So |out - ref| <= u_out * |ref| + (1 + u_out) * 2L * 2^-24 * sum|terms|, plus
// 1e-30 for exact zeros. Truncating instead of rounding, a wrong tap or padding breaks it by far.
int64_t check_close(const std::vector<double>& out, const std::vector<double>& ref, const std::vector<double>& abs,
                    int64_t L, double u_out, const char* what) {
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double tol = u_out * std::fabs(ref[i]) + (1 + u_out) * 2.0 * (double)L * std::ldexp(1.0, -24) * abs[i] + 1e-30;
    if (!(std::fabs(out[i] - ref[i]) <= tol)) {
      if (bad++ < 3)
        MESSAGE(std::string(what) << "[" << i << "]: " << out[i] << " vs f64 " << ref[i] << " (bound " << tol << ")");
    }
  }
  return bad;
}

enum class Cls { finite, nan, pos_inf, neg_inf };
Cls cls(double v) { return std::isnan(v) ? Cls::nan : std::isinf(v) ? (v > 0 ? Cls::pos_inf : Cls::neg_inf) : Cls::finite; }

struct RunOut {
  std::vector<double> y, dx, dw, db;
};

// channels_last: x and dy channels-last (the op then keeps y, dx channels-last: checked).
RunOut run_conv(const Shape2& sh, const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                const std::vector<double>& dy, bool channels_last = false) {
  const Conv2dDesc& d = sh.d;
  const MemoryFormat fmt = channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous;
  Tensor xt = contiguous(to_dtype(tensor_from<double>(x, {d.N, d.C, d.H, d.W}), DType::bf16), fmt).set_requires_grad(true);
  Tensor wt = to_dtype(tensor_from<double>(w, {d.K, d.C / d.groups, d.R, d.S}), DType::bf16).set_requires_grad(true);
  Tensor bt;
  if (sh.bias) bt = to_dtype(tensor_from<double>(b, {d.K}), sh.bias == 1 ? DType::f32 : DType::bf16).set_requires_grad(true);
  Tensor y = conv2d(xt, wt, bt, {d.stride_h, d.stride_w}, {d.pad_h, d.pad_w}, {d.dil_h, d.dil_w}, d.groups);
  REQUIRE(y.dtype() == DType::bf16);
  if (channels_last) CHECK(is_channels_last(y));
  y.backward(contiguous(to_dtype(tensor_from<double>(dy, y.sizes()), DType::bf16), fmt));
  RunOut o;
  o.y = y.to_vector<double>();
  REQUIRE(xt.grad().dtype() == DType::bf16);
  REQUIRE(wt.grad().dtype() == DType::bf16);
  o.dx = xt.grad().to_vector<double>();
  o.dw = wt.grad().to_vector<double>();
  if (sh.bias) {
    REQUIRE(bt.grad().dtype() == bt.dtype());
    o.db = bt.grad().to_vector<double>();
  }
  return o;
}

void check_numerics(Bf16Path p) {
  std::mt19937 g(35);
  for (const Shape2& sh : shapes()) {
    const Conv2dDesc& d = sh.d;
    INFO("N " << d.N << " C " << d.C << " H " << d.H << " W " << d.W << " K " << d.K << " R " << d.R << " S " << d.S
              << " stride " << d.stride_h << "," << d.stride_w << " bias " << sh.bias);
    const bool onednn = cpu::conv2d_bf16_uses_onednn(d);
    CHECK(onednn == (p != Bf16Path::portable));
    if (onednn)
      MESSAGE("conv " << d.C << "->" << d.K << " " << d.R << "x" << d.S << " s" << d.stride_h << ": forward "
                      << std::string(cpu::conv2d_bf16_impl_name(d, cpu::Conv2dPass::forward, cpu::Bf16Bias::none)) << ", backward_input "
                      << std::string(cpu::conv2d_bf16_impl_name(d, cpu::Conv2dPass::backward_input, cpu::Bf16Bias::none))
                      << ", backward_weight "
                      << std::string(cpu::conv2d_bf16_impl_name(d, cpu::Conv2dPass::backward_weight, cpu::Bf16Bias::none)));
    const std::vector<double> x = bf16_values(d.N * d.C * d.H * d.W, g), w = bf16_values(d.K * d.C / d.groups * d.R * d.S, g);
    const std::vector<double> b = sh.bias ? bf16_values(d.K, g) : std::vector<double>();
    const std::vector<double> dy = bf16_values(d.N * d.K * d.out_h() * d.out_w(), g);
    const Ref r = reference(d, x, w, b, dy);
    const RunOut o = run_conv(sh, x, w, b, dy);
    const double u16 = std::ldexp(1.0, -8);
    CHECK(check_close(o.y, r.y, r.y_abs, d.C / d.groups * d.R * d.S + 1, u16, "y") == 0);
    CHECK(check_close(o.dx, r.dx, r.dx_abs, d.K / d.groups * d.R * d.S, u16, "dx") == 0);
    CHECK(check_close(o.dw, r.dw, r.dw_abs, d.N * d.out_h() * d.out_w(), u16, "dw") == 0);
    if (sh.bias)
      CHECK(check_close(o.db, r.db, r.db_abs, d.N * d.out_h() * d.out_w(), sh.bias == 1 ? std::ldexp(1.0, -24) : u16,
                        "db") == 0);
  }
  // NaN and inf in x reach exactly the outputs and weight gradients whose sums take them (f64 says which).
  const Shape2 sh{desc(2, 6, 7, 7, 5, 3, 3, 1, 1, 1, 1), 0};
  const Conv2dDesc& d = sh.d;
  std::vector<double> x = bf16_values(d.N * d.C * d.H * d.W, g), w = bf16_values(d.K * d.C * 9, g);
  const std::vector<double> dy = bf16_values(d.N * d.K * d.out_h() * d.out_w(), g);
  x[3] = NAN, x[d.C * d.H * d.W + 20] = INFINITY, x[d.C * d.H * d.W + 40] = -INFINITY;
  const Ref r = reference(d, x, w, {}, dy);
  const RunOut o = run_conv(sh, x, w, {}, dy);
  int64_t nonfinite = 0, mismatched = 0;
  for (size_t i = 0; i < r.y.size(); ++i) nonfinite += cls(r.y[i]) != Cls::finite, mismatched += cls(o.y[i]) != cls(r.y[i]);
  for (size_t i = 0; i < r.dw.size(); ++i) nonfinite += cls(r.dw[i]) != Cls::finite, mismatched += cls(o.dw[i]) != cls(r.dw[i]);
  CHECK(nonfinite > 20);  // the test sees something
  CHECK(mismatched == 0);
}

void path_case(Bf16Path p, const char* name) {
  CpuIsa level;
  if (!bf16_level_for(p, name, &level)) return;
  IsaGuard guard(level);
  REQUIRE(cpu::bf16_path() == p);
  // 1 thread: every pass on oneDNN. 2 threads, the weight gradient by the rule (conv2d_bf16_wgrad): with
  // K >= 32 split by output channel where the image split does not apply or x is no larger than dw's f32
  // partial; split by image from N*OH*OW >= 256 on and for N > 1; else through f32. The numerics run at 2
  // threads by the rule (these small shapes: f32 staging for K < 32, by channel for K 40 and 48) and with each
  // oneDNN way forced: split (N = 1 then stages through f32; N = 3 splits 2 + 1 images), split by channel
  // (K < 32 then stages through f32) and oneDNN's one call. On NHWC at 2 threads, K >= 256: im2col + matmul
  // where im2col pays, else the channel split also where x is the larger (rule checks only here; the numerics
  // of NHWC by the rule in channels_last_case, whose shapes() include two K 256 shapes).
  using cpu::Bf16Wgrad;
  for (int threads : {1, 2}) {
    cpu::ThreadScope ts(threads);
    MESSAGE(std::string(name) << ": " << cpu::cpu_model_name() << ", isa " << std::string(cpu::cpu_isa_name(level))
                              << ", bf16 path " << std::string(cpu::bf16_path_name(cpu::bf16_path())) << ", oneDNN "
                              << cpu::onednn_version() << ", " << threads << " thread(s)");
    const bool onednn = p != Bf16Path::portable;
    const Conv2dDesc small = desc(2, 32, 8, 8, 24, 3, 3, 1, 1, 1, 1);     // N*OH*OW = 128
    const Conv2dDesc big = desc(2, 32, 12, 12, 24, 3, 3, 1, 1, 1, 1);     // 288
    const Conv2dDesc one_image = desc(1, 32, 20, 20, 24, 3, 3, 1, 1, 1, 1);  // 400, N = 1
    const Conv2dDesc wide_small = desc(2, 32, 8, 8, 64, 3, 3, 1, 1, 1, 1);  // K 64, N*OH*OW = 128
    const Conv2dDesc wide_big_x = desc(2, 32, 24, 24, 32, 3, 3, 1, 1, 1, 1);  // K 32, N*H*W*2 = 2304 > K*R*S*4
    CHECK(cpu::conv2d_bf16_pass_uses_onednn(small, cpu::Conv2dPass::backward_weight) == (onednn && threads == 1));
    CHECK(cpu::conv2d_bf16_pass_uses_onednn(big, cpu::Conv2dPass::backward_weight) == onednn);
    CHECK(cpu::conv2d_bf16_pass_uses_onednn(one_image, cpu::Conv2dPass::backward_weight) == (onednn && threads == 1));
    CHECK(cpu::conv2d_bf16_pass_uses_onednn(small, cpu::Conv2dPass::forward) == onednn);
    // 1 thread: im2col + matmul on small strided output planes (and planes of <= 4 values), by the rule.
    const Conv2dDesc strided_small = desc(2, 16, 9, 9, 24, 3, 3, 2, 2, 1, 1);  // 5x5 output, stride 2
    const Conv2dDesc plane4 = desc(3, 16, 2, 2, 16, 3, 3, 1, 1, 1, 1);        // 2x2 output, stride 1
    if (onednn) {
      CHECK(cpu::conv2d_bf16_wgrad(strided_small) == (threads == 1 ? Bf16Wgrad::im2col : Bf16Wgrad::f32_staging));
      CHECK(cpu::conv2d_bf16_wgrad(plane4) == (threads == 1 ? Bf16Wgrad::im2col : Bf16Wgrad::f32_staging));
      // NHWC: also stride-1 planes of <= 64 values with C*R*S >= 4096 (512->512 3x3 on 7x7); NCHW keeps oneDNN
      const Conv2dDesc deep7 = desc(2, 512, 7, 7, 16, 3, 3, 1, 1, 1, 1), shallow7 = desc(2, 448, 7, 7, 16, 3, 3, 1, 1, 1, 1);
      CHECK(cpu::conv2d_bf16_wgrad(deep7, cpu::Bf16Layout::nhwc) ==
            (threads == 1 ? Bf16Wgrad::im2col : Bf16Wgrad::f32_staging));
      CHECK(cpu::conv2d_bf16_wgrad(deep7) == (threads == 1 ? Bf16Wgrad::onednn : Bf16Wgrad::f32_staging));
      CHECK(cpu::conv2d_bf16_wgrad(shallow7, cpu::Bf16Layout::nhwc) ==
            (threads == 1 ? Bf16Wgrad::onednn : Bf16Wgrad::f32_staging));
      CHECK(cpu::conv2d_bf16_wgrad(big) == (threads == 1 ? Bf16Wgrad::onednn : Bf16Wgrad::split));
      CHECK(cpu::conv2d_bf16_wgrad(small) == (threads == 1 ? Bf16Wgrad::onednn : Bf16Wgrad::f32_staging));
      CHECK(cpu::conv2d_bf16_wgrad(wide_small) == (threads == 1 ? Bf16Wgrad::onednn : Bf16Wgrad::split_channels));
      CHECK(cpu::conv2d_bf16_wgrad(wide_big_x) == (threads == 1 ? Bf16Wgrad::onednn : Bf16Wgrad::split));
      // NHWC above one thread: im2col + matmul where im2col pays and K >= 256 (K 128 keeps the split); the
      // channel split from K >= 256 on also where x is larger than dw's partial (NCHW: by image).
      const Conv2dDesc deep2x2 = desc(2, 256, 4, 4, 256, 3, 3, 2, 2, 1, 1), deep2x2_k128 = desc(2, 256, 4, 4, 128, 3, 3, 2, 2, 1, 1);
      const Conv2dDesc ds256 = desc(2, 32, 24, 24, 256, 1, 1, 1, 1, 0, 0), ds128 = desc(2, 32, 24, 24, 128, 1, 1, 1, 1, 0, 0);
      const cpu::Bf16Layout nhwc = cpu::Bf16Layout::nhwc;
      CHECK(cpu::conv2d_bf16_wgrad(deep2x2, nhwc) == Bf16Wgrad::im2col);
      CHECK(cpu::conv2d_bf16_wgrad(deep2x2) == (threads == 1 ? Bf16Wgrad::im2col : Bf16Wgrad::split_channels));
      CHECK(cpu::conv2d_bf16_wgrad(deep2x2_k128, nhwc) ==
            (threads == 1 ? Bf16Wgrad::im2col : Bf16Wgrad::split_channels));
      CHECK(cpu::conv2d_bf16_wgrad(ds256, nhwc) == (threads == 1 ? Bf16Wgrad::onednn : Bf16Wgrad::split_channels));
      CHECK(cpu::conv2d_bf16_wgrad(ds256) == (threads == 1 ? Bf16Wgrad::onednn : Bf16Wgrad::split));
      CHECK(cpu::conv2d_bf16_wgrad(ds128, nhwc) == (threads == 1 ? Bf16Wgrad::onednn : Bf16Wgrad::split));
    }
    check_numerics(p);
    if (!onednn) continue;
    // Forced ways: 1 thread oneDNN's one call (the rule's im2col shapes then run the direct kernel) and im2col
    // + matmul everywhere; 2 threads every way.
    const std::vector<Bf16Wgrad> forced_ways =
        threads == 1 ? std::vector<Bf16Wgrad>{Bf16Wgrad::onednn, Bf16Wgrad::im2col}
                     : std::vector<Bf16Wgrad>{Bf16Wgrad::split, Bf16Wgrad::split_channels, Bf16Wgrad::onednn,
                                              Bf16Wgrad::im2col};
    for (Bf16Wgrad forced : forced_ways) {
      WgradGuard wg(forced);
      MESSAGE(std::string(name) << ", " << threads << " thread(s), weight gradient forced "
                                << std::string(cpu::bf16_wgrad_name(forced)));
      const bool falls_back = threads == 2 && forced != Bf16Wgrad::onednn && forced != Bf16Wgrad::im2col;
      CHECK(cpu::conv2d_bf16_wgrad(small) ==
            (forced == Bf16Wgrad::split_channels && threads == 2 ? Bf16Wgrad::f32_staging : forced));
      CHECK(cpu::conv2d_bf16_wgrad(one_image) == (falls_back ? Bf16Wgrad::f32_staging : forced));
      CHECK(cpu::conv2d_bf16_wgrad(wide_small) == forced);
      check_numerics(p);
    }
  }
}

// A bf16 conv forward + backward (f32 bias, a ReLU between, like a layer under autocast) on `dev`; x and the
// output's gradient in fmt.
void conv_step(Device dev, const Conv2dDesc& d, MemoryFormat fmt = MemoryFormat::contiguous) {
  Tensor x = empty({d.N, d.C, d.H, d.W}, DType::bf16, dev, fmt);
  Tensor w = empty({d.K, d.C, d.R, d.S}, DType::bf16, dev);
  Tensor b = empty({d.K}, DType::f32, dev);
  if (dev.is_cpu()) fill_(x, 0.5), fill_(w, 0.25), fill_(b, 0.0);
  x.set_requires_grad(true), w.set_requires_grad(true), b.set_requires_grad(true);
  Tensor y = relu(conv2d(x, w, b, {d.stride_h, d.stride_w}, {d.pad_h, d.pad_w}));
  Tensor g = empty(y.sizes(), DType::bf16, dev, fmt);
  if (dev.is_cpu()) fill_(g, 1.0);
  y.backward(g);
}

void memory_case(Bf16Path p, const char* name, MemoryFormat fmt = MemoryFormat::contiguous) {
  const bool cl = fmt == MemoryFormat::channels_last;
  const cpu::Bf16Layout layout = cl ? cpu::Bf16Layout::nhwc : cpu::Bf16Layout::nchw;
  CpuIsa level;
  if (!bf16_level_for(p, name, &level)) return;
  IsaGuard guard(level);
  REQUIRE(cpu::bf16_path() == p);
  for (int threads : {1, 2})
  for (const Conv2dDesc& d : {desc(4, 64, 14, 14, 64, 3, 3, 1, 1, 1, 1), desc(2, 3, 32, 32, 16, 7, 7, 2, 2, 3, 3),
                              desc(3, 32, 9, 9, 48, 3, 3, 2, 2, 1, 1), desc(1, 32, 9, 9, 16, 3, 3, 1, 1, 1, 1),
                              desc(2, 64, 4, 4, 256, 3, 3, 2, 2, 1, 1)}) {
    cpu::ThreadScope ts(threads);
    INFO("C " << d.C << " K " << d.K << " R " << d.R << " stride " << d.stride_h << " threads " << threads);
    const bool onednn = p != Bf16Path::portable;
    CHECK(cpu::conv2d_bf16_uses_onednn(d) == onednn);
    // At 1 thread the 32->48 stride-2 shape (5x5 output) takes im2col + matmul (the rule), the others oneDNN's
    // direct kernel. At 2 threads (the rule) the 64->64 and 32->48 stride-2 shapes split their weight gradient by output
    // channel (x no larger than dw's partial; N*OH*OW = 75), the stem (K 16) by image, the 32->16 one (N = 1,
    // K 16) stages it through f32: every way's allocations are compared. Channels-last: the same (im2col
    // gathers NHWC rows, its workspace has no dy^T piece), but the 64->256 stride-2 one (2x2 output) takes
    // im2col + matmul at 2 threads too (its matmul's workspace sized for 2 threads; NCHW: by channel).
    if (onednn)
      CHECK(cpu::conv2d_bf16_wgrad(d, layout) ==
            (threads == 1       ? (d.K == 48 || d.K == 256 ? cpu::Bf16Wgrad::im2col : cpu::Bf16Wgrad::onednn)
             : d.K == 256 && cl ? cpu::Bf16Wgrad::im2col
             : d.K >= 48        ? cpu::Bf16Wgrad::split_channels
             : d.C == 3   ? cpu::Bf16Wgrad::split
                          : cpu::Bf16Wgrad::f32_staging));
    const size_t fwd =
        onednn ? cpu::conv2d_bf16_workspace_bytes(d, cpu::Conv2dPass::forward, cpu::Bf16Bias::f32, layout) : 0;
    if (onednn) MESSAGE(std::string(name) << (cl ? " channels-last" : "") << ": conv " << d.C << "->" << d.K << " " << d.R << "x" << d.S << " workspace forward " << fwd
                 << " B, backward_input "
                 << cpu::conv2d_bf16_workspace_bytes(d, cpu::Conv2dPass::backward_input, cpu::Bf16Bias::none, layout)
                 << " B, backward_weight "
                 << cpu::conv2d_bf16_workspace_bytes(d, cpu::Conv2dPass::backward_weight, cpu::Bf16Bias::f32, layout) << " B");
    std::vector<int64_t> cpu_events, meta_events;
    int64_t cpu_peak = 0, meta_peak = 0;
    {
      RequestRecorder rec(Device::cpu());
      conv_step(Device::cpu(), d, fmt);
      cpu_events = rec.events, cpu_peak = rec.peak;
      CHECK(rec.live == 0);
    }
    {
      RequestRecorder rec(Device::meta());
      conv_step(Device::meta(), d, fmt);
      meta_events = rec.events, meta_peak = rec.peak;
      CHECK(rec.live == 0);
    }
    // The forward's workspace is among the requests (the test sees the oneDNN path's allocations).
    if (onednn) CHECK(std::find(cpu_events.begin(), cpu_events.end(), (int64_t)fwd) != cpu_events.end());
    CHECK(cpu_events.size() > 6);
    CHECK(meta_events == cpu_events);
    CHECK(meta_peak == cpu_peak);
  }
}

}  // namespace

TEST_CASE("conv2d bf16 path onednn amx: forward and gradients against f64") {
  path_case(Bf16Path::onednn_amx, "onednn amx");
}
TEST_CASE("conv2d bf16 path onednn avx512_bf16: forward and gradients against f64") {
  path_case(Bf16Path::onednn_avx512_bf16, "onednn avx512_bf16");
}
TEST_CASE("conv2d bf16 path portable: forward and gradients against f64") {
  path_case(Bf16Path::portable, "portable");
}

TEST_CASE("conv2d bf16: groups > 1 take the portable path, also when oneDNN is available") {
  CHECK_FALSE(cpu::conv2d_bf16_uses_onednn(desc(16, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1)));  // small CNN conv1: C*R*S 9
  CHECK_FALSE(cpu::conv2d_bf16_uses_direct(desc(2, 8, 7, 7, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2)));
  const Conv2dDesc d = desc(2, 8, 7, 7, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2);
  CHECK_FALSE(cpu::conv2d_bf16_uses_onednn(d));
  std::mt19937 g(7);
  const std::vector<double> x = bf16_values(d.N * d.C * d.H * d.W, g), w = bf16_values(d.K * (d.C / 2) * 9, g);
  const std::vector<double> dy = bf16_values(d.N * d.K * d.out_h() * d.out_w(), g);
  const Ref r = reference(d, x, w, {}, dy);
  const RunOut o = run_conv({d, 0}, x, w, {}, dy);
  const double u16 = std::ldexp(1.0, -8);
  CHECK(check_close(o.y, r.y, r.y_abs, 4 * 9, u16, "y") == 0);
  CHECK(check_close(o.dx, r.dx, r.dx_abs, 3 * 9, u16, "dx") == 0);
  CHECK(check_close(o.dw, r.dw, r.dw_abs, d.N * d.out_h() * d.out_w(), u16, "dw") == 0);
  if (cpu::onednn_built()) CHECK_THROWS_WITH_AS(cpu::conv2d_bf16_workspace_bytes(d, cpu::Conv2dPass::forward, cpu::Bf16Bias::none),
                                                doctest::Contains("groups 2 is not supported"), Error);
}

TEST_CASE("cpu isa: a refused AMX tile request gives the next lower bf16 level") {
  cpu::CpuFeatures f;
  f.v3 = f.v4 = f.avx512_bf16 = f.amx_bf16 = f.amx_tile = f.os_avx512 = f.os_amx = true;
  f.amx_permitted = true;
  CHECK(cpu::cpu_isa_from(f) == CpuIsa::amx);
  f.amx_permitted = false;  // arch_prctl(ARCH_REQ_XCOMP_PERM) failed
  CHECK(cpu::cpu_isa_from(f) == CpuIsa::avx512_bf16);
  f.os_amx = false, f.amx_permitted = true;  // the OS does not save the tile state
  CHECK(cpu::cpu_isa_from(f) == CpuIsa::avx512_bf16);
  f.avx512_bf16 = false;
  CHECK(cpu::cpu_isa_from(f) == CpuIsa::avx512);
  f.v4 = false;
  CHECK(cpu::cpu_isa_from(f) == CpuIsa::avx2);
  // The real probe with the request forced to fail (KILN_TEST_AMX_REQUEST=fail): never amx, and on this CPU
  // the best level without the tiles.
  const cpu::CpuFeatures real = cpu::cpu_features_probe();
  setenv("KILN_TEST_AMX_REQUEST", "fail", 1);
  const cpu::CpuFeatures refused = cpu::cpu_features_probe();
  unsetenv("KILN_TEST_AMX_REQUEST");
  CHECK_FALSE(refused.amx_permitted);
  const CpuIsa lower = cpu::cpu_isa_from(refused);
  CHECK(lower != CpuIsa::amx);
  cpu::CpuFeatures no_tiles = real;
  no_tiles.amx_permitted = false;
  CHECK(lower == cpu::cpu_isa_from(no_tiles));
  MESSAGE(cpu::cpu_model_name() << ": amx_tile " << real.amx_tile << ", amx_bf16 " << real.amx_bf16 << ", os tile state "
                                << real.os_amx << ", tile request granted " << real.amx_permitted << ", avx512_bf16 "
                                << real.avx512_bf16 << "; level " << std::string(cpu::cpu_isa_name(cpu::cpu_isa_from(real)))
                                << ", with the request refused " << std::string(cpu::cpu_isa_name(lower)));
  if (real.amx_tile && real.amx_bf16 && real.os_amx) CHECK(lower == CpuIsa::avx512_bf16);
}

TEST_CASE("conv2d bf16 memory onednn amx: meta requests == cpu requests") {
  memory_case(Bf16Path::onednn_amx, "onednn amx");
}
TEST_CASE("conv2d bf16 memory onednn avx512_bf16: meta requests == cpu requests") {
  memory_case(Bf16Path::onednn_avx512_bf16, "onednn avx512_bf16");
}
TEST_CASE("conv2d bf16 memory portable: meta requests == cpu requests") {
  memory_case(Bf16Path::portable, "portable");
}
TEST_CASE("conv2d bf16 memory onednn amx channels-last: meta requests == cpu requests") {
  memory_case(Bf16Path::onednn_amx, "onednn amx", MemoryFormat::channels_last);
}
TEST_CASE("conv2d bf16 memory onednn avx512_bf16 channels-last: meta requests == cpu requests") {
  memory_case(Bf16Path::onednn_avx512_bf16, "onednn avx512_bf16", MemoryFormat::channels_last);
}

namespace {

// Channels-last against NCHW on one oneDNN path: shapes() (bias f32 / bf16, stride 2, 1x1, the 7x7 stem,
// dilation, K 40 / 48) at 1 and 2 threads, the weight gradient by the rule and forced to each oneDNN way and
// to im2col + matmul (NHWC windows gathered, dy read in place as the transposed operand). Each
// of y, dx, dw, db within check_numerics' f64 bound (the same bound the NCHW path meets; oneDNN's NHWC
// kernels add in another order, so the bits may differ), y channels-last, and no pass on a gemm / ref kernel.
// The number of values that differ from the NCHW run's bits is printed.
void channels_last_case(Bf16Path p, const char* name) {
  using cpu::Bf16Wgrad;
  CpuIsa level;
  if (!bf16_level_for(p, name, &level)) return;
  IsaGuard guard(level);
  REQUIRE(cpu::bf16_path() == p);
  std::mt19937 g(36);
  const double u16 = std::ldexp(1.0, -8);
  for (int threads : {1, 2})
    for (Bf16Wgrad forced : {Bf16Wgrad::by_rule, Bf16Wgrad::split, Bf16Wgrad::split_channels, Bf16Wgrad::im2col}) {
      // one thread: splits are oneDNN's one call; im2col (NHWC rows gathered) at any thread count
      if (threads == 1 && forced != Bf16Wgrad::by_rule && forced != Bf16Wgrad::im2col) continue;
      cpu::ThreadScope ts(threads);
      WgradGuard wg(forced);
      int64_t differ = 0, total = 0;
      for (const Shape2& sh : shapes()) {
        const Conv2dDesc& d = sh.d;
        INFO("N " << d.N << " C " << d.C << " H " << d.H << " W " << d.W << " K " << d.K << " R " << d.R << " S "
                  << d.S << " stride " << d.stride_h << "," << d.stride_w << " bias " << sh.bias << " threads "
                  << threads << " wgrad " << std::string(cpu::bf16_wgrad_name(forced)));
        REQUIRE(cpu::conv2d_bf16_uses_onednn(d));
        if (threads == 2 && forced == Bf16Wgrad::by_rule && d.K == 256)  // the NHWC rule's two ways above 1 thread
          CHECK(cpu::conv2d_bf16_wgrad(d, cpu::Bf16Layout::nhwc) ==
                (d.R == 3 ? Bf16Wgrad::im2col : Bf16Wgrad::split_channels));
        for (cpu::Conv2dPass pass : {cpu::Conv2dPass::forward, cpu::Conv2dPass::backward_input,
                                     cpu::Conv2dPass::backward_weight}) {
          const std::string impl = cpu::conv2d_bf16_impl_name(d, pass, cpu::Bf16Bias::none, cpu::Bf16Layout::nhwc);
          if (threads == 1 && forced == Bf16Wgrad::by_rule)
            MESSAGE(std::string(name) << " channels-last conv " << d.C << "->" << d.K << " " << d.R << "x" << d.S
                                      << " s" << d.stride_h << " pass " << (int)pass << ": " << impl);
          CHECK(impl.find("gemm") == std::string::npos);
          CHECK(impl.find("ref") == std::string::npos);
        }
        const std::vector<double> x = bf16_values(d.N * d.C * d.H * d.W, g), w = bf16_values(d.K * d.C * d.R * d.S, g);
        const std::vector<double> b = sh.bias ? bf16_values(d.K, g) : std::vector<double>();
        const std::vector<double> dy = bf16_values(d.N * d.K * d.out_h() * d.out_w(), g);
        const Ref r = reference(d, x, w, b, dy);
        const RunOut cl = run_conv(sh, x, w, b, dy, true);
        const RunOut nchw = run_conv(sh, x, w, b, dy, false);
        CHECK(check_close(cl.y, r.y, r.y_abs, d.C * d.R * d.S + 1, u16, "y") == 0);
        CHECK(check_close(cl.dx, r.dx, r.dx_abs, d.K * d.R * d.S, u16, "dx") == 0);
        CHECK(check_close(cl.dw, r.dw, r.dw_abs, d.N * d.out_h() * d.out_w(), u16, "dw") == 0);
        if (sh.bias)
          CHECK(check_close(cl.db, r.db, r.db_abs, d.N * d.out_h() * d.out_w(),
                            sh.bias == 1 ? std::ldexp(1.0, -24) : u16, "db") == 0);
        REQUIRE(cl.y.size() == nchw.y.size());
        REQUIRE(cl.dx.size() == nchw.dx.size());
        REQUIRE(cl.dw.size() == nchw.dw.size());
        for (size_t i = 0; i < cl.y.size(); ++i) differ += cl.y[i] != nchw.y[i];
        for (size_t i = 0; i < cl.dx.size(); ++i) differ += cl.dx[i] != nchw.dx[i];
        for (size_t i = 0; i < cl.dw.size(); ++i) differ += cl.dw[i] != nchw.dw[i];
        total += (int64_t)(cl.y.size() + cl.dx.size() + cl.dw.size());
      }
      MESSAGE(std::string(name) << ", " << threads << " thread(s), wgrad " << std::string(cpu::bf16_wgrad_name(forced))
                                << ": channels-last y, dx, dw differ from NCHW's bits in " << differ << " of " << total
                                << " values");
    }
}

}  // namespace

// The NHWC im2col rows (conv2d_bf16_im2col_nhwc) against a direct gather, bit for bit (random 16-bit
// patterns, NaN ones included: the rows move bits), at the baseline level and, where the CPU has it, avx512
// (32 channels per vector permute step): C 40 and 33 (a 32-channel step and a scalar tail), C 64 with
// stride 2 and padding, a 2x2 and a 3x5 dilated window, a 1x1, C 16 (below one step: scalar at every
// level) and a 1x17 window (17 taps: scalar), at 1 and 2 threads.
TEST_CASE("conv2d bf16 im2col NHWC: rows against a direct gather, the same at every ISA level") {
  std::mt19937 g(37);
  std::uniform_int_distribution<int> bits(0, 0xffff);
  std::vector<CpuIsa> levels{CpuIsa::baseline};
  if ((int)cpu::cpu_isa_supported() >= (int)CpuIsa::avx512) levels.push_back(CpuIsa::avx512);
  int64_t vector_rows = 0;
  for (const Conv2dDesc& d : {desc(2, 40, 7, 7, 8, 3, 3, 1, 1, 1, 1), desc(1, 64, 9, 8, 8, 3, 3, 2, 2, 1, 1),
                              desc(2, 32, 5, 6, 8, 2, 2, 1, 1, 0, 0), desc(1, 48, 8, 9, 8, 3, 5, 1, 2, 2, 1, 2, 1),
                              desc(1, 33, 4, 4, 8, 1, 1, 1, 1, 0, 0), desc(2, 16, 5, 5, 8, 3, 3, 1, 1, 1, 1),
                              desc(1, 32, 3, 20, 8, 1, 17, 1, 1, 0, 0)}) {
    const int64_t OH = d.out_h(), OW = d.out_w(), rs = d.R * d.S, crs = d.C * rs, npq = d.N * OH * OW;
    std::vector<uint16_t> x((size_t)(d.N * d.H * d.W * d.C));  // NHWC
    for (auto& v : x) v = (uint16_t)bits(g);
    std::vector<uint16_t> want((size_t)(npq * crs));
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow)
          for (int64_t c = 0; c < d.C; ++c)
            for (int64_t r = 0; r < d.R; ++r)
              for (int64_t s = 0; s < d.S; ++s) {
                const int64_t ih = oh * d.stride_h - d.pad_h + r * d.dil_h, iw = ow * d.stride_w - d.pad_w + s * d.dil_w;
                const bool in = ih >= 0 && ih < d.H && iw >= 0 && iw < d.W;
                want[(size_t)(((n * OH + oh) * OW + ow) * crs + c * rs + r * d.S + s)] =
                    in ? x[(size_t)(((n * d.H + ih) * d.W + iw) * d.C + c)] : 0;
              }
    for (CpuIsa isa : levels)
      for (int threads : {1, 2}) {
        cpu::ThreadScope ts(threads);
        INFO("C " << d.C << " " << d.R << "x" << d.S << " stride " << d.stride_h << "," << d.stride_w << " level "
                  << std::string(cpu::cpu_isa_name(isa)) << " threads " << threads);
        std::vector<uint16_t> col((size_t)(npq * crs), 0x1234);
        cpu::conv2d_bf16_im2col_nhwc(d, reinterpret_cast<const bfloat16*>(x.data()),
                                     reinterpret_cast<bfloat16*>(col.data()), isa);
        int64_t wrong = 0;
        for (size_t i = 0; i < col.size(); ++i) wrong += col[i] != want[i];
        CHECK(wrong == 0);
        if (isa == CpuIsa::avx512 && d.C >= 32 && rs <= 16) vector_rows += npq;
      }
  }
  MESSAGE("im2col NHWC: " << vector_rows << " rows on the avx512 permutes (0: this CPU has no AVX-512)");
}

TEST_CASE("conv2d bf16 channels-last onednn amx: NHWC forward and gradients against f64 and NCHW") {
  channels_last_case(Bf16Path::onednn_amx, "onednn amx");
}
TEST_CASE("conv2d bf16 channels-last onednn avx512_bf16: NHWC forward and gradients against f64 and NCHW") {
  channels_last_case(Bf16Path::onednn_avx512_bf16, "onednn avx512_bf16");
}

namespace {

// Forces the direct kernel's choice for a scope (-1 the rule, 0 never, 1 every groups-1 shape).
struct DirectGuard {
  explicit DirectGuard(int mode) : old(cpu::set_conv2d_bf16_direct_forced(mode)) {}
  ~DirectGuard() { cpu::set_conv2d_bf16_direct_forced(old); }
  int old;
};

// The direct kernel's spans in the op trace of one run_conv (forward, input gradient, weight gradient).
struct DirectSpans {
  int64_t forward = 0, backward_input = 0, backward_weight = 0, other_conv = 0;
};
DirectSpans direct_spans() {
  DirectSpans n;
  for (const OpSpan& s : op_trace_take()) {
    const std::string name(s.name);
    if (name == "conv2d_bf16_direct_forward") ++n.forward;
    else if (name == "conv2d_bf16_direct_backward_input") ++n.backward_input;
    else if (name == "conv2d_bf16_direct_backward_weight") ++n.backward_weight;
    else if (name.find("conv2d") != std::string::npos) ++n.other_conv;
  }
  return n;
}

// The small CNN's conv1 (1->32 3x3, padding 1, 28 px; 2 images), a 1-channel 5x5 stride-2 one and a 1x1 with
// 15 input channels (C*R*S = 15, the largest the rule takes), beside shapes() (forced).
std::vector<Shape2> direct_rule_shapes() {
  return {
      {desc(2, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1), 0},  // small CNN conv1
      {desc(3, 1, 11, 9, 7, 3, 5, 2, 2, 1, 2), 1},    // rectangular kernel, stride 2, f32 bias, C*R*S 15
      {desc(1, 15, 6, 5, 4, 1, 1, 1, 1, 0, 0), 2},    // 1x1 over 15 channels, bf16 bias
      {desc(2, 1, 9, 10, 3, 3, 3, 1, 3, 2, 0, 2, 1), 0},  // dilation 2 along h, stride 3 along w, padding 2
  };
}

void check_direct_numerics(const std::vector<Shape2>& list, std::mt19937& g) {
  for (const Shape2& sh : list) {
    const Conv2dDesc& d = sh.d;
    INFO("N " << d.N << " C " << d.C << " H " << d.H << " W " << d.W << " K " << d.K << " R " << d.R << " S " << d.S
              << " stride " << d.stride_h << "," << d.stride_w << " bias " << sh.bias);
    REQUIRE(cpu::conv2d_bf16_uses_direct(d));
    const std::vector<double> x = bf16_values(d.N * d.C * d.H * d.W, g), w = bf16_values(d.K * d.C * d.R * d.S, g);
    const std::vector<double> b = sh.bias ? bf16_values(d.K, g) : std::vector<double>();
    const std::vector<double> dy = bf16_values(d.N * d.K * d.out_h() * d.out_w(), g);
    const Ref r = reference(d, x, w, b, dy);
    op_trace_enable(true);
    op_trace_take();
    const RunOut o = run_conv(sh, x, w, b, dy);
    const DirectSpans spans = direct_spans();
    op_trace_enable(false);
    CHECK(spans.forward == 1);
    CHECK(spans.backward_input == 1);
    CHECK(spans.backward_weight == 1);
    CHECK(spans.other_conv == 0);
    const double u16 = std::ldexp(1.0, -8);
    CHECK(check_close(o.y, r.y, r.y_abs, d.C * d.R * d.S + 1, u16, "y") == 0);
    CHECK(check_close(o.dx, r.dx, r.dx_abs, d.K * d.R * d.S, u16, "dx") == 0);
    CHECK(check_close(o.dw, r.dw, r.dw_abs, d.N * d.out_h() * d.out_w(), u16, "dw") == 0);
    if (sh.bias)
      CHECK(check_close(o.db, r.db, r.db_abs, d.N * d.out_h() * d.out_w(), sh.bias == 1 ? std::ldexp(1.0, -24) : u16,
                        "db") == 0);
  }
}

// y, dw, db bits of one run (x and w as given), to compare ISA levels and thread counts.
std::vector<double> direct_bits(const Shape2& sh, const std::vector<double>& x, const std::vector<double>& w,
                                const std::vector<double>& b, const std::vector<double>& dy) {
  RunOut o = run_conv(sh, x, w, b, dy);
  std::vector<double> all = o.y;
  all.insert(all.end(), o.dx.begin(), o.dx.end());
  all.insert(all.end(), o.dw.begin(), o.dw.end());
  all.insert(all.end(), o.db.begin(), o.db.end());
  return all;
}

}  // namespace

TEST_CASE("conv2d bf16 direct: the rule, its override and its errors") {
  DirectGuard rule(-1);
  CHECK(cpu::conv2d_bf16_uses_direct(desc(128, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1)));  // small CNN conv1: C*R*S 9
  CHECK(cpu::conv2d_bf16_uses_direct(desc(2, 15, 6, 6, 4, 1, 1, 1, 1, 0, 0)));      // 15
  CHECK_FALSE(cpu::conv2d_bf16_uses_direct(desc(2, 16, 6, 6, 4, 1, 1, 1, 1, 0, 0)));  // 16: oneDNN's rule
  CHECK_FALSE(cpu::conv2d_bf16_uses_direct(desc(128, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1)));  // small CNN conv2
  CHECK_FALSE(cpu::conv2d_bf16_uses_direct(desc(2, 2, 6, 6, 4, 1, 1, 1, 1, 0, 0, 1, 1, 2)));  // groups 2
  {
    DirectGuard on(1);
    CHECK(cpu::conv2d_bf16_uses_direct(desc(128, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1)));
    CHECK_FALSE(cpu::conv2d_bf16_uses_direct(desc(2, 2, 6, 6, 4, 1, 1, 1, 1, 0, 0, 1, 1, 2)));  // groups: never
  }
  {
    DirectGuard off(0);
    CHECK_FALSE(cpu::conv2d_bf16_uses_direct(desc(128, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1)));
  }
  CHECK_THROWS_WITH_AS(cpu::set_conv2d_bf16_direct_forced(2), doctest::Contains("mode 2"), Error);
  std::vector<bfloat16> x(2 * 2 * 5 * 5), w(4 * 1 * 3 * 3), y(2 * 4 * 5 * 5);
  CHECK_THROWS_WITH_AS(cpu::conv2d_bf16_direct_forward(desc(2, 2, 5, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 2), x.data(),
                                                       w.data(), nullptr, cpu::Bf16Bias::none, y.data()),
                       doctest::Contains("conv2d_bf16_direct_forward: groups 2 is not supported"), Error);
}

TEST_CASE("conv2d bf16 direct: forward and gradients against f64, the same bits at every ISA and thread count") {
  std::mt19937 g(351);
  for (int threads : {1, 2}) {
    cpu::ThreadScope ts(threads);
    MESSAGE("direct: " << cpu::cpu_model_name() << ", isa " << std::string(cpu::cpu_isa_name(cpu::cpu_isa())) << ", "
                       << threads << " thread(s)");
    {
      DirectGuard rule(-1);
      check_direct_numerics(direct_rule_shapes(), g);  // by the rule
    }
    DirectGuard on(1);
    std::vector<Shape2> forced;
    for (const Shape2& sh : shapes())
      if (sh.d.groups == 1) forced.push_back(sh);
    check_direct_numerics(forced, g);  // every groups-1 shape of the oneDNN cases, forced
  }
  // The same bits at each ISA level this CPU has and at 1 and 2 threads (fixed-order f32 sums).
  DirectGuard rule(-1);
  for (const Shape2& sh : direct_rule_shapes()) {
    const Conv2dDesc& d = sh.d;
    const std::vector<double> x = bf16_values(d.N * d.C * d.H * d.W, g), w = bf16_values(d.K * d.C * d.R * d.S, g);
    const std::vector<double> b = sh.bias ? bf16_values(d.K, g) : std::vector<double>();
    const std::vector<double> dy = bf16_values(d.N * d.K * d.out_h() * d.out_w(), g);
    std::vector<double> first;
    int runs = 0;
    for (CpuIsa isa : {CpuIsa::baseline, CpuIsa::avx2, CpuIsa::avx512}) {
      if ((int)isa > (int)cpu::cpu_isa_supported()) continue;
      IsaGuard guard(isa);
      for (int threads : {1, 2}) {
        cpu::ThreadScope ts(threads);
        const std::vector<double> bits = direct_bits(sh, x, w, b, dy);
        if (first.empty()) first = bits;
        INFO("isa " << std::string(cpu::cpu_isa_name(isa)) << " threads " << threads << " C " << d.C << " K " << d.K);
        CHECK(bits == first);
        ++runs;
      }
    }
    CHECK(runs >= 2);
  }
}

TEST_CASE("conv2d bf16 direct: NaN and inf in x reach exactly the outputs and weight gradients f64 says") {
  DirectGuard rule(-1);
  std::mt19937 g(352);
  const Shape2 sh{desc(2, 1, 9, 8, 5, 3, 3, 1, 1, 1, 1), 1};
  const Conv2dDesc& d = sh.d;
  REQUIRE(cpu::conv2d_bf16_uses_direct(d));
  std::vector<double> x = bf16_values(d.N * d.C * d.H * d.W, g), w = bf16_values(d.K * 9, g), b = bf16_values(d.K, g);
  const std::vector<double> dy = bf16_values(d.N * d.K * d.out_h() * d.out_w(), g);
  // a NaN inside, +inf on the left edge (image 1, row 3, column 0), -inf in the last corner
  x[13] = NAN, x[d.H * d.W + 3 * d.W] = INFINITY, x[2 * d.H * d.W - 1] = -INFINITY;
  const Ref r = reference(d, x, w, b, dy);
  const RunOut o = run_conv(sh, x, w, b, dy);
  int64_t nonfinite = 0, mismatched = 0;
  for (size_t i = 0; i < r.y.size(); ++i) nonfinite += cls(r.y[i]) != Cls::finite, mismatched += cls(o.y[i]) != cls(r.y[i]);
  for (size_t i = 0; i < r.dw.size(); ++i) nonfinite += cls(r.dw[i]) != Cls::finite, mismatched += cls(o.dw[i]) != cls(r.dw[i]);
  CHECK(nonfinite > 20);
  CHECK(mismatched == 0);
  // the bias gradient does not see x: finite
  for (double v : o.db) CHECK(std::isfinite(v));
}

TEST_CASE("conv2d bf16 memory direct: meta requests == cpu requests") {
  DirectGuard rule(-1);
  for (int threads : {1, 2})
    for (const Conv2dDesc& d : {desc(16, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1), desc(3, 1, 11, 9, 7, 3, 5, 2, 2, 1, 2)}) {
      cpu::ThreadScope ts(threads);
      INFO("C " << d.C << " K " << d.K << " threads " << threads);
      REQUIRE(cpu::conv2d_bf16_uses_direct(d));
      std::vector<int64_t> cpu_events, meta_events;
      int64_t cpu_peak = 0, meta_peak = 0;
      {
        RequestRecorder rec(Device::cpu());
        conv_step(Device::cpu(), d);
        cpu_events = rec.events, cpu_peak = rec.peak;
        CHECK(rec.live == 0);
      }
      {
        RequestRecorder rec(Device::meta());
        conv_step(Device::meta(), d);
        meta_events = rec.events, meta_peak = rec.peak;
        CHECK(rec.live == 0);
      }
      CHECK(cpu_events.size() > 6);
      CHECK(meta_events == cpu_events);
      CHECK(meta_peak == cpu_peak);
    }
}
