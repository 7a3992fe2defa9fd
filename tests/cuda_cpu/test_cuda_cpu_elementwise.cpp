// kiln's elementwise, dropout, optimizer, pooling, interpolation, transposed-convolution, one-hot and
// confusion kernels (kernels/cuda/*.cu) run in the CPU execution mode against the CPU backend:
// contiguous, misaligned (the scalar path of the vectorized kernels) and non-contiguous operands, every
// dtype, sizes that are not multiples of the vector width or the block, NaN / inf / -0 / denormals.
// Exact where the operation is exact (copies, casts between floats, max, indices, counts, Philox masks).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/core/half.h"
#include "engine/core/op_modes.h"
#include "kernels/cpu/confusion.h"
#include "kernels/cpu/conv_transpose2d.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/interpolate.h"
#include "kernels/cpu/one_hot.h"
#include "kernels/cpu/optim_update.h"
#include "kernels/cpu/pool.h"
#include "kernels/common/float_to_int.h"
#include "cuda_cpu/adversarial.h"
// The CPU mode's declarations (namespace kiln::cuda_on_cpu); after the CPU backend's.
#include "kernels/cuda_cpu/prelude.h"
#include "kernels/cuda/backend.h"
#include "kernels/cuda/confusion_backend.h"
#include "kernels/cuda/deferred_error.h"
#include "kernels/cuda/nn_backend.h"
#include "kernels/cuda/upsampling_backend.h"

namespace cpu = kiln::cpu;
namespace gpu = kiln::cuda_on_cpu;
using kiln::BinaryOp;
using kiln::DType;
using kiln::LoopShape;
using kiln::StridedOperand;
using kiln::UnaryOp;
using kiln_test::adversarial;
using kiln_test::compare;

namespace {

template <typename T> DType dt();
template <> DType dt<float>() { return DType::f32; }
template <> DType dt<double>() { return DType::f64; }
template <> DType dt<kiln::half>() { return DType::f16; }
template <> DType dt<kiln::bfloat16>() { return DType::bf16; }
template <> DType dt<int32_t>() { return DType::i32; }
template <> DType dt<int64_t>() { return DType::i64; }
template <> DType dt<uint8_t>() { return DType::u8; }

template <typename T>
StridedOperand operand(T* p, int64_t s0, int64_t s1) {
  StridedOperand o;
  o.data = reinterpret_cast<char*>(p);
  o.dtype = dt<T>();
  o.strides[0] = s0;
  o.strides[1] = s1;
  return o;
}

// Layouts: contiguous n; contiguous but one element off 16-byte alignment; a (rows, cols) view of a
// transposed (cols, rows) buffer.
struct Layout {
  const char* name;
  int64_t rows, cols;
  bool misaligned, transposed;
};
const Layout kLayouts[] = {{"contiguous 1", 1, 1, false, false},     {"contiguous 4099", 1, 4099, false, false},
                           {"misaligned 1001", 1, 1001, true, false}, {"transposed 7x9", 7, 9, false, true},
                           {"contiguous 33", 1, 33, false, false}};

template <typename T>
void unary_binary_case(double rtol, double atol) {
  for (const Layout& L : kLayouts) {
    const int64_t n = L.rows * L.cols, off = L.misaligned ? 1 : 0;
    const std::vector<T> x = adversarial<T>((size_t)(n + 1), 50 + n), y = adversarial<T>((size_t)(n + 1), 51 + n);
    LoopShape shape;
    shape.ndim = 2;
    shape.sizes[0] = L.rows;
    shape.sizes[1] = L.cols;
    const int64_t is0 = L.transposed ? 1 : L.cols, is1 = L.transposed ? L.rows : 1;
    for (int op = 0; op <= (int)UnaryOp::isfinite; ++op) {
      std::vector<T> ow((size_t)(n + 1), T(0.0)), og((size_t)(n + 1), T(0.0));
      cpu::unary((UnaryOp)op, shape, operand(ow.data() + off, L.cols, 1), operand((T*)x.data() + off, is0, is1), 0.5, 2.0);
      gpu::unary((UnaryOp)op, shape, operand(og.data() + off, L.cols, 1), operand((T*)x.data() + off, is0, is1), 0.5, 2.0);
      const std::string what = kiln::str_cat("unary op ", op, " ", dtype_name(dt<T>()), " ", L.name);
      CHECK_MESSAGE(compare(og, ow, rtol, atol, what) == 0, what);
    }
    for (int op = 0; op <= (int)BinaryOp::ge_mask; ++op) {
      std::vector<T> ow((size_t)(n + 1), T(0.0)), og((size_t)(n + 1), T(0.0));
      cpu::binary((BinaryOp)op, shape, operand(ow.data() + off, L.cols, 1), operand((T*)x.data() + off, is0, is1),
                  operand((T*)y.data() + off, L.cols, 1), 0.25);
      gpu::binary((BinaryOp)op, shape, operand(og.data() + off, L.cols, 1), operand((T*)x.data() + off, is0, is1),
                  operand((T*)y.data() + off, L.cols, 1), 0.25);
      const std::string what = kiln::str_cat("binary op ", op, " ", dtype_name(dt<T>()), " ", L.name);
      CHECK_MESSAGE(compare(og, ow, rtol, atol, what) == 0, what);
    }
  }
}

}  // namespace

TEST_CASE("CPU mode: unary and binary ops, every op and float dtype, contiguous / misaligned / transposed") {
  const int64_t launches = gpu::run_stats().launches;
  unary_binary_case<float>(2e-6, 1e-30);
  CHECK(gpu::run_stats().launches >= launches + 5 * 33);  // the kernels really ran, one launch per op and layout
  unary_binary_case<double>(1e-12, 1e-300);
  unary_binary_case<kiln::half>(1e-3, 1e-7);
  unary_binary_case<kiln::bfloat16>(8e-3, 1e-30);
}

TEST_CASE("CPU mode: copy between float dtypes, fill and where are bit-exact with the CPU backend") {
  const int64_t n = 1037;
  const std::vector<float> x = adversarial<float>((size_t)n, 60);
  LoopShape shape;
  shape.ndim = 1;
  shape.sizes[0] = n;
  auto check_cast = [&](auto zero) {
    using D = decltype(zero);
    std::vector<D> w((size_t)n), g((size_t)n);
    cpu::copy(shape, operand(w.data(), 1, 0), operand((float*)x.data(), 1, 0));
    gpu::copy(shape, operand(g.data(), 1, 0), operand((float*)x.data(), 1, 0));
    CHECK(compare(g, w, 0, 0, kiln::str_cat("cast f32 -> ", dtype_name(dt<D>()))) == 0);
    std::vector<float> back_w((size_t)n), back_g((size_t)n);
    cpu::copy(shape, operand(back_w.data(), 1, 0), operand(w.data(), 1, 0));
    gpu::copy(shape, operand(back_g.data(), 1, 0), operand(g.data(), 1, 0));
    CHECK(compare(back_g, back_w, 0, 0, kiln::str_cat("cast ", dtype_name(dt<D>()), " -> f32")) == 0);
  };
  check_cast(0.0);
  check_cast(kiln::half(0.f));
  check_cast(kiln::bfloat16(0.f));
  // Same dtype: a word copy, here from a transposed (31, 33) view (misaligned by one element).
  for (DType d : {DType::f32, DType::f16, DType::f64, DType::u8}) {
    const size_t es = kiln::dtype_size(d);
    std::vector<unsigned char> src(31 * 33 * es + es), cw(31 * 33 * es), cg(31 * 33 * es);
    for (size_t i = 0; i < src.size(); ++i) src[i] = (unsigned char)(i * 37 + 11);
    LoopShape s2;
    s2.ndim = 2;
    s2.sizes[0] = 33;
    s2.sizes[1] = 31;
    StridedOperand so, dw, dg;
    so.data = reinterpret_cast<char*>(src.data() + es), so.dtype = d, so.strides[0] = 1, so.strides[1] = 33;
    dw.data = reinterpret_cast<char*>(cw.data()), dw.dtype = d, dw.strides[0] = 31, dw.strides[1] = 1;
    dg = dw;
    dg.data = reinterpret_cast<char*>(cg.data());
    cpu::copy(s2, dw, so);
    gpu::copy(s2, dg, so);
    CHECK_MESSAGE(cw == cg, "copy ", dtype_name(d));
  }
  std::vector<float> w((size_t)n), g((size_t)n);
  cpu::fill(shape, operand(w.data(), 1, 0), -0.0);
  gpu::fill(shape, operand(g.data(), 1, 0), -0.0);
  CHECK(std::memcmp(w.data(), g.data(), w.size() * 4) == 0);
  std::vector<float> cond = adversarial<float>((size_t)n, 61), y = adversarial<float>((size_t)n, 62);
  cpu::where(shape, operand(w.data(), 1, 0), operand(cond.data(), 1, 0), operand((float*)x.data(), 1, 0),
             operand(y.data(), 1, 0));
  gpu::where(shape, operand(g.data(), 1, 0), operand(cond.data(), 1, 0), operand((float*)x.data(), 1, 0),
             operand(y.data(), 1, 0));
  CHECK(compare(g, w, 0, 0, "where") == 0);
}

// Float -> integer: one rule on both backends (kernels/common/float_to_int.h): truncate toward zero,
// saturate to the range, NaN -> 0. Before it, the CPU gave x86's INT_MIN for NaN / inf / out of
// range (and u8 wrapped through i64) while the GPU saturated.
template <typename I>
void float_to_int_case(const std::vector<double>& in, const std::vector<int64_t>& want_i) {
  const int64_t n = (int64_t)in.size();
  REQUIRE(want_i.size() == in.size());
  LoopShape shape;
  shape.ndim = 1;
  shape.sizes[0] = n;
  std::vector<I> want(want_i.begin(), want_i.end());
  const std::string name = dtype_name(dt<I>());
  std::vector<float> in_f(in.begin(), in.end());
  for (bool f64 : {true, false}) {
    std::vector<I> w((size_t)n, I(7)), g((size_t)n, I(7));
    const StridedOperand src = f64 ? operand((double*)in.data(), 1, 0) : operand(in_f.data(), 1, 0);
    cpu::copy(shape, operand(w.data(), 1, 0), src);
    gpu::copy(shape, operand(g.data(), 1, 0), src);
    for (int64_t i = 0; i < n; ++i) {
      // f32 input: the value as f32 holds it (huge doubles round, the rule is the same).
      const double v = f64 ? in[(size_t)i] : (double)in_f[(size_t)i];
      const I expect = kiln::float_to_int<I>(v);
      if (f64) CHECK_MESSAGE(expect == want[(size_t)i], "rule ", name, " of ", v);
      CHECK_MESSAGE(w[(size_t)i] == expect, "cpu cast ", f64 ? "f64" : "f32", " -> ", name, " of ", v, ": ", (int64_t)w[(size_t)i]);
      CHECK_MESSAGE(g[(size_t)i] == expect, "cuda cast ", f64 ? "f64" : "f32", " -> ", name, " of ", v, ": ", (int64_t)g[(size_t)i]);
    }
  }
  for (size_t i = 0; i < in.size(); ++i) {  // fill with each value
    std::vector<I> w(37, I(7)), g(37, I(7));
    LoopShape s;
    s.ndim = 1;
    s.sizes[0] = 37;
    cpu::fill(s, operand(w.data(), 1, 0), in[i]);
    gpu::fill(s, operand(g.data(), 1, 0), in[i]);
    CHECK_MESSAGE(w == std::vector<I>(37, want[i]), "cpu fill ", name, " with ", in[i], ": ", (int64_t)w[0]);
    CHECK_MESSAGE(g == std::vector<I>(37, want[i]), "cuda fill ", name, " with ", in[i], ": ", (int64_t)g[0]);
  }
}

TEST_CASE("CPU mode: float to integer casts and fills saturate, NaN gives 0, on both backends") {
  const double nan = std::nan(""), inf = INFINITY;
  const std::vector<double> in = {nan, -nan, inf, -inf, -0.0, 0.0, 0.99, -0.99, 1.5, -1.5, 127.9, 255.5, 256.0,
                                  -1.0, -200.0, 2147483647.5, 2147483648.0, -2147483648.9, -2147483649.0, 3e9,
                                  -3e9, 1e19, -1e19, 9.3e18, 1e300, -1e300, 123456789.0};
  const int64_t imax = INT32_MAX, imin = INT32_MIN, lmax = INT64_MAX, lmin = INT64_MIN;
  float_to_int_case<int32_t>(in, {0, 0, imax, imin, 0, 0, 0, 0, 1, -1, 127, 255, 256, -1, -200, imax, imax, imin,
                                  imin, imax, imin, imax, imin, imax, imax, imin, 123456789});
  float_to_int_case<uint8_t>(in, {0, 0, 255, 0, 0, 0, 0, 0, 1, 0, 127, 255, 255, 0, 0, 255, 255, 0, 0, 255, 0, 255,
                                  0, 255, 255, 0, 255});
  float_to_int_case<int64_t>(in, {0, 0, lmax, lmin, 0, 0, 0, 0, 1, -1, 127, 255, 256, -1, -200, 2147483647,
                                  2147483648, -2147483648, -2147483649, 3000000000, -3000000000, lmax, lmin, lmax,
                                  lmax, lmin, 123456789});
}

TEST_CASE("CPU mode: random_fill (Philox uniform and normal) matches the CPU backend") {
  for (DType d : {DType::f32, DType::f64})
    for (int kind : {0, 1})
      for (int64_t n : {1, 7, 1001}) {
        std::vector<double> w((size_t)n), g((size_t)n);
        cpu::random_fill(w.data(), d, n, kind, -1.0, 2.0, 99, 4);
        gpu::random_fill(g.data(), d, n, kind, -1.0, 2.0, 99, 4);
        if (d == DType::f32) {
          std::vector<float> wf((size_t)n), gf((size_t)n);
          std::memcpy(wf.data(), w.data(), (size_t)n * 4);
          std::memcpy(gf.data(), g.data(), (size_t)n * 4);
          CHECK(compare(gf, wf, 1e-6, 1e-7, "random_fill f32") == 0);
        } else {
          CHECK(compare(g, w, 1e-12, 1e-14, "random_fill f64") == 0);
        }
      }
}

TEST_CASE("CPU mode: dropout masks (Philox) and optimizer updates match the CPU backend") {
  for (int64_t n : {1, 5, 1027}) {
    const std::vector<float> x = adversarial<float>((size_t)n, 70 + n);
    std::vector<float> yw((size_t)n), yg((size_t)n), dw((size_t)n), dg((size_t)n);
    std::vector<uint8_t> mw((size_t)n), mg((size_t)n);
    cpu::dropout_forward<float>(n, x.data(), 0.3, 1234, 8, yw.data(), mw.data());
    gpu::dropout_forward<float>(n, x.data(), 0.3, 1234, 8, yg.data(), mg.data());
    CHECK(mg == mw);
    CHECK(compare(yg, yw, 0, 0, "dropout forward") == 0);
    cpu::dropout_backward<float>(n, x.data(), mw.data(), 0.3, dw.data());
    gpu::dropout_backward<float>(n, x.data(), mw.data(), 0.3, dg.data());
    CHECK(compare(dg, dw, 0, 0, "dropout backward") == 0);
    const std::vector<float> p0 = kiln_test::moderate<float>((size_t)n, 71), grad = adversarial<float>((size_t)n, 72, 13);
    for (bool first : {true, false}) {
      std::vector<float> pw = p0, pg = p0, bw((size_t)n, 0.1f), bg = bw;
      const kiln::optim::SgdParams h{0.1f, 0.9f, 0.1f, 1e-4f, true};
      cpu::sgd_fused(pw.data(), grad.data(), bw.data(), n, first, h);
      gpu::sgd_fused(pg.data(), grad.data(), bg.data(), n, first, h);
      CHECK(compare(pg, pw, 1e-6, 1e-7, "sgd p") == 0);
      CHECK(compare(bg, bw, 1e-6, 1e-7, "sgd buf") == 0);
    }
    std::vector<float> pw = p0, pg = p0, mw2((size_t)n, 0.01f), mg2 = mw2, vw((size_t)n, 0.02f), vg = vw;
    const kiln::optim::AdamWParams a{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1e-3f / 0.1f, 0.0316f};
    cpu::adamw_fused(pw.data(), grad.data(), mw2.data(), vw.data(), n, a);
    gpu::adamw_fused(pg.data(), grad.data(), mg2.data(), vg.data(), n, a);
    CHECK(compare(pg, pw, 1e-6, 1e-7, "adamw p") == 0);
    CHECK(compare(vg, vw, 1e-6, 1e-7, "adamw v") == 0);
  }
}

TEST_CASE("CPU mode: max / avg / adaptive pooling forward and backward against the CPU backend") {
  kiln::Pool2dDesc d;
  d.N = 2, d.C = 3, d.H = 9, d.W = 7, d.kh = 3, d.kw = 2, d.stride_h = 2, d.stride_w = 2, d.pad_h = 1, d.pad_w = 1;
  for (bool ceil : {false, true}) {
    d.ceil_mode = ceil;
    const int64_t in = d.N * d.C * d.H * d.W, out = d.N * d.C * d.out_h() * d.out_w();
    const std::vector<float> x = adversarial<float>((size_t)in, 80), dy = adversarial<float>((size_t)out, 81, 0);
    std::vector<float> yw((size_t)out), yg((size_t)out), dxw((size_t)in), dxg((size_t)in);
    std::vector<int64_t> iw((size_t)out), ig((size_t)out);
    cpu::max_pool2d_forward<float>(d, x.data(), yw.data(), iw.data());
    gpu::max_pool2d_forward<float>(d, x.data(), yg.data(), ig.data());
    CHECK(compare(yg, yw, 0, 0, "max_pool forward") == 0);
    CHECK(ig == iw);
    cpu::max_pool2d_backward<float>(d, dy.data(), iw.data(), dxw.data());
    gpu::max_pool2d_backward<float>(d, dy.data(), iw.data(), dxg.data());
    CHECK(compare(dxg, dxw, 1e-6, 1e-7, "max_pool backward") == 0);
    for (bool pad : {false, true}) {
      cpu::avg_pool2d_forward<float>(d, pad, x.data(), yw.data());
      gpu::avg_pool2d_forward<float>(d, pad, x.data(), yg.data());
      CHECK(compare(yg, yw, 1e-6, 1e-7, "avg_pool forward") == 0);
      cpu::avg_pool2d_backward<float>(d, pad, dy.data(), dxw.data());
      gpu::avg_pool2d_backward<float>(d, pad, dy.data(), dxg.data());
      CHECK(compare(dxg, dxw, 1e-6, 1e-7, "avg_pool backward") == 0);
    }
  }
  for (auto [OH, OW] : {std::pair<int64_t, int64_t>{1, 1}, {4, 3}, {9, 7}}) {
    const int64_t in = 2 * 3 * 9 * 7, out = 2 * 3 * OH * OW;
    const std::vector<float> x = adversarial<float>((size_t)in, 82), dy = adversarial<float>((size_t)out, 83, 0);
    std::vector<float> yw((size_t)out), yg((size_t)out), dxw((size_t)in), dxg((size_t)in);
    cpu::adaptive_avg_pool2d_forward<float>(2, 3, 9, 7, OH, OW, x.data(), yw.data());
    gpu::adaptive_avg_pool2d_forward<float>(2, 3, 9, 7, OH, OW, x.data(), yg.data());
    CHECK(compare(yg, yw, 1e-6, 1e-7, "adaptive_avg forward") == 0);
    cpu::adaptive_avg_pool2d_backward<float>(2, 3, 9, 7, OH, OW, dy.data(), dxw.data());
    gpu::adaptive_avg_pool2d_backward<float>(2, 3, 9, 7, OH, OW, dy.data(), dxg.data());
    CHECK(compare(dxg, dxw, 1e-6, 1e-7, "adaptive_avg backward") == 0);
  }
}

TEST_CASE("CPU mode: interpolation and transposed convolution against the CPU backend") {
  for (kiln::InterpMode mode : {kiln::InterpMode::nearest, kiln::InterpMode::bilinear})
    for (bool ac : {false, true}) {
      if (mode == kiln::InterpMode::nearest && ac) continue;
      kiln::Interp2dDesc d;
      d.N = 2, d.C = 2, d.H = 5, d.W = 3, d.OH = 11, d.OW = 6, d.mode = mode, d.align_corners = ac;
      const int64_t in = d.N * d.C * d.H * d.W, out = d.N * d.C * d.OH * d.OW;
      const std::vector<float> x = adversarial<float>((size_t)in, 90, 0), dy = adversarial<float>((size_t)out, 91, 0);
      std::vector<float> yw((size_t)out), yg((size_t)out), dxw((size_t)in), dxg((size_t)in);
      cpu::interpolate2d_forward<float>(d, x.data(), yw.data());
      gpu::interpolate2d_forward<float>(d, x.data(), yg.data());
      CHECK(compare(yg, yw, 1e-6, 1e-6, "interpolate forward") == 0);
      cpu::interpolate2d_backward<float>(d, dy.data(), dxw.data());
      gpu::interpolate2d_backward<float>(d, dy.data(), dxg.data());
      CHECK(compare(dxg, dxw, 1e-5, 1e-5, "interpolate backward") == 0);
    }
  kiln::ConvTranspose2dDesc d;
  d.N = 2, d.C = 3, d.H = 4, d.W = 5, d.K = 2, d.R = 3, d.S = 2, d.stride_h = 2, d.stride_w = 1, d.pad_h = 1;
  const int64_t in = d.N * d.C * d.H * d.W, out = d.N * d.K * d.out_h() * d.out_w(), nw = d.C * d.K * d.R * d.S;
  const std::vector<float> x = kiln_test::moderate<float>((size_t)in, 92), w = kiln_test::moderate<float>((size_t)nw, 93),
                           b = kiln_test::moderate<float>((size_t)d.K, 94), dy = kiln_test::moderate<float>((size_t)out, 95);
  std::vector<char> wsc(cpu::conv_transpose2d_workspace_bytes(d, 4) + 1), wsg(gpu::conv_transpose2d_workspace_bytes(d, 4) + 1);
  std::vector<float> yw((size_t)out), yg((size_t)out), dxw((size_t)in), dxg((size_t)in), dww((size_t)nw), dwg((size_t)nw),
      dbw((size_t)d.K), dbg((size_t)d.K);
  cpu::conv_transpose2d_forward<float>(d, x.data(), w.data(), b.data(), yw.data(), wsc.data());
  gpu::conv_transpose2d_forward<float>(d, x.data(), w.data(), b.data(), yg.data(), wsg.data());
  CHECK(compare(yg, yw, 1e-5, 1e-5, "conv_transpose2d forward") == 0);
  cpu::conv_transpose2d_backward_input<float>(d, dy.data(), w.data(), dxw.data(), wsc.data());
  gpu::conv_transpose2d_backward_input<float>(d, dy.data(), w.data(), dxg.data(), wsg.data());
  CHECK(compare(dxg, dxw, 1e-5, 1e-5, "conv_transpose2d backward input") == 0);
  cpu::conv_transpose2d_backward_weight<float>(d, x.data(), dy.data(), dww.data(), dbw.data(), wsc.data());
  gpu::conv_transpose2d_backward_weight<float>(d, x.data(), dy.data(), dwg.data(), dbg.data(), wsg.data());
  CHECK(compare(dwg, dww, 1e-5, 1e-5, "conv_transpose2d backward weight") == 0);
  CHECK(compare(dbg, dbw, 1e-5, 1e-5, "conv_transpose2d backward bias") == 0);
}

TEST_CASE("CPU mode: one_hot and the confusion matrix (ignored targets, NaN scores) match the CPU backend") {
  const int64_t N = 3, K = 4, S = 10;
  std::vector<int64_t> t((size_t)(N * S));
  for (size_t i = 0; i < t.size(); ++i) t[i] = (int64_t)((i * 5) % K);
  t[4] = 255;  // ignore_index
  std::vector<float> ow((size_t)(N * K * S)), og((size_t)(N * K * S));
  cpu::one_hot_forward<float>(N, K, S, t.data(), 255, ow.data(), "target");
  gpu::one_hot_forward<float>(N, K, S, t.data(), 255, og.data(), "target");
  CHECK(compare(og, ow, 0, 0, "one_hot") == 0);
  const std::vector<float> scores = adversarial<float>((size_t)(N * K * S), 100, 5);
  std::vector<int64_t> cw((size_t)(K * K), 0), cg((size_t)(K * K), 0);
  cpu::confusion_matrix_accumulate<float>(N, K, S, scores.data(), t.data(), 255, cw.data());
  gpu::confusion_matrix_accumulate<float>(N, K, S, scores.data(), t.data(), 255, cg.data());
  CHECK(cg == cw);
}

TEST_CASE("CPU mode: an out-of-range one_hot or confusion target is reported at the next check, as on the GPU") {
  std::vector<int64_t> t = {0, 1, 9, 2};
  std::vector<float> out(4 * 3);
  gpu::one_hot_forward<float>(4, 3, 1, t.data(), 255, out.data(), "target");
  CHECK_THROWS_WITH_AS(gpu::check_deferred_errors(0, "test"), doctest::Contains("target 9 at position 2"), kiln::Error);
  const std::vector<float> scores(4 * 3, 0.5f);
  std::vector<int64_t> counts(9, 0);
  gpu::confusion_matrix_accumulate<float>(4, 3, 1, scores.data(), t.data(), 255, counts.data());
  CHECK_THROWS_WITH_AS(gpu::check_deferred_errors(0, "test"), doctest::Contains("confusion_matrix"), kiln::Error);
  gpu::check_deferred_errors(0, "test");  // reported once, then clear
}
