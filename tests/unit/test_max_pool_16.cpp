// The CPU's 16-bit max pool (kernels/cpu/pool.cpp's bfloat16 / half instantiations, engine/ops/nn_pool.cpp):
// max is exact, so the direct kernels must give the bits of the f32-staged composition (x widened to f32, the
// f32 kernel, y rounded back; dy widened, the f32 scatter, dx rounded back) and the same indices, on windows
// 2x2 stride 2 (the small CNN's), 3x3 stride 2 pad 1 (ResNet's stem: overlapping windows, so dx sums), a
// dilated one and ceil mode, with NaN, +-inf, a window of -inf only, -0 against +0, ties, and 1 and 2
// threads, planes staged on the stack and planes too large for it; the backward on arbitrary indices; the op
// runs the direct kernels and a meta run makes the CPU run's allocation requests.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/core/half.h"
#include "engine/ops/op_trace.h"
#include "engine/ops/ops.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/pool_nhwc.h"
#include "kernels/cpu/threads.h"
#include "support/cpu_paths.h"

using namespace kiln;
using kiln::test::RequestRecorder;

namespace {

template <typename X>
uint16_t bits16(X v) {
  uint16_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// x: N*C planes of H x W: small integers (many ties), -0 / +0 pairs, and one NaN, one +inf, and a band of
// -inf (a whole window of -inf where the window fits in it) per plane.
std::vector<float> pool_input(int64_t N, int64_t C, int64_t H, int64_t W, std::mt19937& rng) {
  std::uniform_int_distribution<int> small(-4, 4);
  std::vector<float> x((size_t)(N * C * H * W));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * (float)small(rng);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t p = 0; p < N * C; ++p) {
    float* xp = x.data() + p * H * W;
    for (int64_t w = 0; w < W; ++w) xp[w] = w % 2 ? -0.0f : 0.0f;          // row 0: -0 against +0
    for (int64_t w = 0; w < std::min<int64_t>(W, 4); ++w) xp[(H - 1) * W + w] = -inf;  // last row starts with -inf
    if (H > 3) xp[(H - 2) * W + 0] = -inf, xp[(H - 2) * W + 1] = -inf, xp[(H - 2) * W + 2] = -inf, xp[(H - 2) * W + 3] = -inf;
    xp[(p * 7) % (H * W)] = std::numeric_limits<float>::quiet_NaN();
    xp[(p * 11 + 5) % (H * W)] = inf;
  }
  return x;
}

struct PoolCase {
  const char* name;
  Pool2dDesc d;
};

Pool2dDesc desc(int64_t N, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t p, int64_t dil, bool ceil) {
  Pool2dDesc d;
  d.N = N, d.C = C, d.H = H, d.W = W, d.kh = k, d.kw = k, d.stride_h = s, d.stride_w = s, d.pad_h = p, d.pad_w = p;
  d.dil_h = dil, d.dil_w = dil, d.ceil_mode = ceil;
  return d;
}

template <typename X>
void check_case(const PoolCase& pc, std::mt19937& rng) {
  const Pool2dDesc& d = pc.d;
  const int64_t in = d.N * d.C * d.H * d.W, out = d.N * d.C * d.out_h() * d.out_w();
  const std::vector<float> xf = pool_input(d.N, d.C, d.H, d.W, rng);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<X> x16((size_t)in), dy16((size_t)out);
  std::vector<float> x32((size_t)in), dy32((size_t)out);
  for (int64_t i = 0; i < in; ++i) x16[(size_t)i] = X(xf[(size_t)i]), x32[(size_t)i] = (float)x16[(size_t)i];
  // one signaling NaN per plane (a 16-bit pattern no f32 conversion makes): y must carry it quieted, as the
  // f32 round trip does
  const uint16_t snan = std::is_same_v<X, bfloat16> ? 0x7f81 : 0x7c01;
  for (int64_t p = 0; p < d.N * d.C; ++p) {
    const size_t i = (size_t)(p * d.H * d.W + (p * 7 + 3) % (d.H * d.W));
    std::memcpy(static_cast<void*>(&x16[i]), &snan, sizeof snan);
    x32[i] = (float)x16[i];
  }
  for (int64_t i = 0; i < out; ++i) {
    float v = nd(rng);
    if (i % 13 == 0) v = -0.0f;  // a -0 gradient: 0 + -0 is +0 in the f32 scatter
    dy16[(size_t)i] = X(v), dy32[(size_t)i] = (float)dy16[(size_t)i];
  }
  // the f32-staged reference
  std::vector<float> y32((size_t)out), dx32((size_t)in);
  std::vector<int64_t> i32((size_t)out);
  cpu::max_pool2d_forward<float>(d, x32.data(), y32.data(), i32.data());
  cpu::max_pool2d_backward<float>(d, dy32.data(), i32.data(), dx32.data());
  int sums = 0;  // inputs that received more than one gradient (the overlapping windows' sums)
  {
    std::vector<int> hits((size_t)in, 0);
    for (int64_t o = 0; o < out; ++o)
      if (i32[(size_t)o] >= 0) ++hits[(size_t)((o / (d.out_h() * d.out_w())) * d.H * d.W + i32[(size_t)o])];
    for (int h : hits) sums += h > 1;
  }
  std::vector<cpu::CpuIsa> levels = {cpu::CpuIsa::baseline};  // the bf16 widen / narrow runs per level
  if ((int)cpu::cpu_isa_supported() >= (int)cpu::CpuIsa::avx2) levels.push_back(cpu::CpuIsa::avx2);
  if ((int)cpu::cpu_isa_supported() >= (int)cpu::CpuIsa::avx512) levels.push_back(cpu::CpuIsa::avx512);
  for (cpu::CpuIsa isa : levels)
  for (int threads : {1, 2}) {
    kiln::test::IsaGuard guard(isa);
    cpu::ThreadScope ts(threads);
    INFO(std::string(pc.name) << " isa " << cpu::cpu_isa_name(isa) << " threads " << threads);
    std::vector<X> y16((size_t)out), dx16((size_t)in);
    std::vector<int64_t> i16((size_t)out);
    cpu::max_pool2d_forward<X>(d, x16.data(), y16.data(), i16.data());
    cpu::max_pool2d_backward<X>(d, dy16.data(), i16.data(), dx16.data());
    int bad_y = 0, bad_dx = 0, nan_y = 0;
    for (int64_t o = 0; o < out; ++o) {
      bad_y += bits16(y16[(size_t)o]) != bits16(X(y32[(size_t)o]));
      nan_y += std::isnan((float)y16[(size_t)o]);
    }
    for (int64_t i = 0; i < in; ++i) bad_dx += bits16(dx16[(size_t)i]) != bits16(X(dx32[(size_t)i]));
    CHECK(bad_y == 0);
    CHECK(i16 == i32);
    CHECK(bad_dx == 0);
    CHECK(nan_y > 0);  // the NaNs propagated
  }
  if (d.stride_h < d.kh) CHECK(sums > 0);  // overlapping windows: some inputs sum gradients
}

}  // namespace

TEST_CASE("max_pool2d 16-bit CPU kernels: bf16 and f16 give the f32-staged bits and indices (NaN, inf, -0, ties, overlapping windows)") {
  std::mt19937 rng(35);
  const PoolCase cases[] = {
      {"2x2 stride 2", desc(2, 3, 8, 10, 2, 2, 0, 1, false)},
      // the small CNN's planes (rows of 14 and 7 outputs) and rows of 17 (a full 16-output chunk and a tail)
      // from an odd width and height (the last column and row unused): the AVX-512 bf16 2x2 loop's masks
      {"2x2 stride 2, 28x28", desc(1, 2, 28, 28, 2, 2, 0, 1, false)},
      {"2x2 stride 2, 14x14", desc(2, 2, 14, 14, 2, 2, 0, 1, false)},
      {"2x2 stride 2, 9x35", desc(1, 3, 9, 35, 2, 2, 0, 1, false)},
      {"3x3 stride 2 pad 1 (ResNet stem)", desc(2, 3, 13, 17, 3, 2, 1, 1, false)},
      {"3x3 stride 2 pad 1, ceil mode", desc(1, 2, 12, 11, 3, 2, 1, 1, true)},
      {"3x3 stride 1 dilation 2 pad 1", desc(1, 2, 9, 9, 3, 1, 1, 2, false)},
      {"2x2 stride 2 ceil mode, odd size", desc(1, 2, 7, 9, 2, 2, 0, 1, true)},
      // planes over the 16384 values staged on the stack: the direct 16-bit loops, the backward in two bands
      {"3x3 stride 2 pad 1, a plane of 18900 values", desc(1, 2, 9, 2100, 3, 2, 1, 1, false)},
      {"2x2 stride 2, a plane of 18900 values", desc(1, 2, 10, 1890, 2, 2, 0, 1, false)},
  };
  for (const PoolCase& pc : cases) {
    check_case<bfloat16>(pc, rng);
    check_case<half>(pc, rng);
  }
}

TEST_CASE("max_pool2d 16-bit CPU backward: any indices, -1 and out of range skipped, give the f32 kernel's bits") {
  const Pool2dDesc d = desc(2, 1, 6, 6, 3, 2, 1, 1, false);  // 3x3 output per plane
  std::mt19937 rng(37);
  std::uniform_int_distribution<int64_t> any(-3, 40);  // -1.., in range 0..35, and past the plane
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<bfloat16> dy(18), dx(72);
  std::vector<float> dy32(18), dx32(72);
  std::vector<int64_t> idx(18);
  for (int i = 0; i < 18; ++i) {
    idx[(size_t)i] = i % 5 == 0 ? 7 : any(rng);  // index 7 repeated: a sum of several gradients
    dy[(size_t)i] = bfloat16(nd(rng)), dy32[(size_t)i] = (float)dy[(size_t)i];
  }
  cpu::max_pool2d_backward<bfloat16>(d, dy.data(), idx.data(), dx.data());
  cpu::max_pool2d_backward<float>(d, dy32.data(), idx.data(), dx32.data());
  int bad = 0;
  for (int i = 0; i < 72; ++i) bad += bits16(dx[(size_t)i]) != bits16(bfloat16(dx32[(size_t)i]));
  CHECK(bad == 0);

  // 2x2 stride 2 (the bf16 AVX-512 loop's windows), 4 planes of 7x9 (rows of 4 outputs): plane 0's indices each in
  // their own window, as the forward makes them; planes 1-3 with one index in another window (two gradients sum
  // there), out of the plane, or -1: those planes are the scatter's, at every ISA level
  const Pool2dDesc d2 = desc(2, 2, 7, 9, 2, 2, 0, 1, false);  // 3x4 outputs per plane
  std::vector<bfloat16> dy2(48), dx2(252);
  std::vector<float> dy2f(48), dx2f(252);
  std::vector<int64_t> idx2(48);
  for (int p = 0; p < 4; ++p)
    for (int oh = 0; oh < 3; ++oh)
      for (int ow = 0; ow < 4; ++ow) {
        const int o = (p * 3 + oh) * 4 + ow;
        idx2[(size_t)o] = (2 * oh + (o % 3 == 1)) * 9 + 2 * ow + (o % 2);
        dy2[(size_t)o] = bfloat16(o % 7 == 0 ? -0.0f : nd(rng)), dy2f[(size_t)o] = (float)dy2[(size_t)o];
      }
  idx2[12 + 5] = idx2[12 + 4];  // plane 1: outputs 4 and 5 both at output 4's tap
  idx2[24 + 2] = 63;            // plane 2: past the 7x9 plane
  idx2[36 + 11] = -1;           // plane 3: none
  cpu::max_pool2d_backward<float>(d2, dy2f.data(), idx2.data(), dx2f.data());
  std::vector<cpu::CpuIsa> levels = {cpu::CpuIsa::baseline};
  if ((int)cpu::cpu_isa_supported() >= (int)cpu::CpuIsa::avx512) levels.push_back(cpu::CpuIsa::avx512);
  for (cpu::CpuIsa isa : levels) {
    kiln::test::IsaGuard guard(isa);
    INFO("isa " << cpu::cpu_isa_name(isa));
    std::fill(dx2.begin(), dx2.end(), bfloat16(7.0f));  // every element written
    cpu::max_pool2d_backward<bfloat16>(d2, dy2.data(), idx2.data(), dx2.data());
    int bad2 = 0;
    for (int i = 0; i < 252; ++i) bad2 += bits16(dx2[(size_t)i]) != bits16(bfloat16(dx2f[(size_t)i]));
    CHECK(bad2 == 0);
  }
}

TEST_CASE("max_pool2d 16-bit CPU op: the direct kernels run, the staged op's bits, and a meta run makes the CPU run's requests") {
  std::mt19937 rng(36);
  const int64_t N = 2, C = 3, H = 9, W = 11;
  const std::vector<float> xv = pool_input(N, C, H, W, rng);
  for (DType dt : {DType::bf16, DType::f16}) {
    INFO(dtype_name(dt));
    Tensor x = to_dtype(tensor_from(xv, {N, C, H, W}), dt).detach();
    x.set_requires_grad(true);
    op_trace_enable(true);
    op_trace_take();
    Tensor y = max_pool2d(x, {3, 3}, {2, 2}, {1, 1});
    REQUIRE(y.dtype() == dt);
    Tensor g = to_dtype(full(y.sizes(), 0.5), dt);
    y.backward(g);
    const std::vector<OpSpan> spans = op_trace_take();
    op_trace_enable(false);
    int fwd = 0, bwd = 0;
    for (const OpSpan& s : spans) {
      fwd += std::string(s.name) == "max_pool2d_forward_16";
      bwd += std::string(s.name) == "max_pool2d_backward_16";
    }
    CHECK(fwd == 1);
    CHECK(bwd == 1);
    // the staged composition
    Tensor x32 = to_dtype(x, DType::f32).detach();
    x32.set_requires_grad(true);
    Tensor y32 = max_pool2d(x32, {3, 3}, {2, 2}, {1, 1});
    y32.backward(to_dtype(g, DType::f32));
    const std::vector<float> a = to_dtype(y, DType::f32).to_vector<float>(),
                             b = to_dtype(to_dtype(y32, dt), DType::f32).to_vector<float>();
    const std::vector<float> da = to_dtype(x.grad(), DType::f32).to_vector<float>(),
                             db = to_dtype(to_dtype(x32.grad(), dt), DType::f32).to_vector<float>();
    REQUIRE(a.size() == b.size());
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    REQUIRE(da.size() == db.size());
    CHECK(std::memcmp(da.data(), db.data(), da.size() * sizeof(float)) == 0);
    // allocations: cpu and meta (imitating the cpu) make the same requests
    std::vector<int64_t> ev[2];
    int64_t peak[2] = {0, 0};
    int k = 0;
    for (Device dev : {Device::cpu(), Device::meta()}) {
      RequestRecorder rec(dev);
      {
        Tensor xm = empty({N, C, H, W}, dt, dev);
        if (dev.is_cpu()) fill_(xm, 1.0);
        xm.set_requires_grad(true);
        Tensor ym = max_pool2d(xm, {3, 3}, {2, 2}, {1, 1});
        Tensor gm = empty(ym.sizes(), dt, dev);
        if (dev.is_cpu()) fill_(gm, 1.0);
        ym.backward(gm);
      }
      ev[k] = rec.events, peak[k] = rec.peak;
      CHECK(rec.live == 0);
      ++k;
    }
    CHECK(ev[0].size() >= 5);
    CHECK(ev[0] == ev[1]);
    CHECK(peak[0] == peak[1]);
  }
}

// The channels-last forward (kernels/cpu/pool_nhwc.h: the winner's plane index kept beside its value) against the
// NCHW kernel on the same values: y's bits and the indices equal at every instruction set level and 1 / 2 threads,
// C = 19 and 70 (runs of channels that are no multiple of a vector), windows of -inf only, NaN, ties.
TEST_CASE("max_pool2d 16-bit CPU channels-last forward: the NCHW kernel's y bits and indices at every ISA level") {
  std::mt19937 rng(7);
  std::vector<cpu::CpuIsa> isas = {cpu::CpuIsa::baseline};
  if ((int)cpu::cpu_isa_supported() >= (int)cpu::CpuIsa::avx2) isas.push_back(cpu::CpuIsa::avx2);
  if ((int)cpu::cpu_isa_supported() >= (int)cpu::CpuIsa::avx512) isas.push_back(cpu::CpuIsa::avx512);
  for (int64_t C : {19, 70})
    for (const Pool2dDesc& d : {desc(2, C, 9, 11, 3, 2, 1, 1, false), desc(2, C, 8, 10, 2, 2, 0, 1, false),
                                desc(2, C, 9, 11, 3, 2, 1, 2, true)}) {
      const int64_t N = d.N, H = d.H, W = d.W, OH = d.out_h(), OW = d.out_w();
      const std::vector<float> x32 = pool_input(N, C, H, W, rng);
      std::vector<bfloat16> x((size_t)(N * C * H * W)), xl(x.size());
      for (size_t i = 0; i < x.size(); ++i) x[i] = bfloat16(x32[i]);
      for (int64_t n = 0; n < N; ++n)  // (N, C, H, W) -> (N, H, W, C)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t i = 0; i < H * W; ++i) xl[(size_t)((n * H * W + i) * C + c)] = x[(size_t)((n * C + c) * H * W + i)];
      std::vector<bfloat16> y((size_t)(N * C * OH * OW));
      std::vector<int64_t> ix(y.size());
      cpu::max_pool2d_forward<bfloat16>(d, x.data(), y.data(), ix.data());
      for (cpu::CpuIsa isa : isas)
        for (int threads : {1, 2}) {
          kiln::test::IsaGuard guard(isa);
          cpu::ThreadScope ts(threads);
          INFO("C " << C << " kernel " << d.kh << " dilation " << d.dil_h << " isa " << cpu::cpu_isa_name(isa)
                    << " threads " << threads);
          std::vector<bfloat16> yl(y.size());
          std::vector<int64_t> il(y.size(), -7);
          cpu::max_pool2d_forward_nhwc<bfloat16>(d, xl.data(), yl.data(), il.data());
          int64_t bad_y = 0, bad_i = 0, nans = 0;
          for (int64_t n = 0; n < N; ++n)
            for (int64_t c = 0; c < C; ++c)
              for (int64_t o = 0; o < OH * OW; ++o) {
                const size_t a = (size_t)((n * C + c) * OH * OW + o), b = (size_t)((n * OH * OW + o) * C + c);
                bad_y += bits16(y[a]) != bits16(yl[b]);
                bad_i += ix[a] != il[b];
                nans += std::isnan((float)yl[b]);
              }
          CHECK(bad_y == 0);
          CHECK(bad_i == 0);
          CHECK(nans > 0);  // the test sees NaNs win their windows
        }
    }
}
