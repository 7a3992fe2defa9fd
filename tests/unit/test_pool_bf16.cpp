// bf16 max pooling on the CPU (kernels/cpu/pool.h's 16-bit max pool kernels (spans max_pool2d_forward_16 / backward_16) through
// engine/ops/nn_pool.cpp): the same output bits and gradient bits as the f32 path on f32 copies rounded back
// (the staging it replaces), on the small CNN's 2x2 stride-2 pool and general windows (padding, dilation,
// ceil_mode, odd sizes) with ties, NaN and -inf, at 1 and 2 threads; its op-trace spans; and a bf16 max pool
// forward+backward on meta making exactly the CPU run's allocation requests.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/ops/op_trace.h"
#include "engine/ops/ops.h"
#include "kernels/cpu/threads.h"
#include "support/cpu_paths.h"

using namespace kiln;
using kiln::test::RequestRecorder;

namespace {

std::vector<uint16_t> bits_of(const Tensor& t) {
  Tensor c = contiguous(t);
  REQUIRE(c.dtype() == DType::bf16);
  std::vector<uint16_t> v(c.numel());
  std::memcpy(v.data(), c.data_ptr(), v.size() * sizeof(uint16_t));
  return v;
}

struct PoolCase {
  int64_t N, C, H, W, k, s, p, dil;
  bool ceil;
};

// Values on a coarse grid (many ties inside windows), a few NaN and -inf.
std::vector<double> pool_values(int64_t n, std::mt19937& g) {
  std::uniform_int_distribution<int> u(-6, 6);
  std::vector<double> v(n);
  for (auto& x : v) x = u(g) * 0.375;
  for (int64_t i = 5; i < n; i += 97) v[i] = NAN;
  for (int64_t i = 11; i < n; i += 61) v[i] = -INFINITY;
  return v;
}

}  // namespace

TEST_CASE("max_pool2d bf16 on the CPU: the f32 path's output and gradient bits, without f32 copies") {
  std::mt19937 g(36);
  const std::vector<PoolCase> cases = {
      {3, 4, 28, 28, 2, 2, 0, 1, false},  // the small CNN's pools (2x2 stride 2)
      {2, 3, 14, 14, 2, 2, 0, 1, false},
      {2, 3, 9, 7, 2, 2, 0, 1, false},   // odd sizes: the last row and column dropped
      {2, 3, 11, 10, 3, 2, 1, 1, false},  // ResNet's stem pool shape, padding
      {1, 2, 9, 9, 3, 1, 1, 2, false},   // dilation 2
      {2, 2, 8, 7, 3, 2, 0, 1, true},    // ceil_mode
  };
  for (int threads : {1, 2}) {
    cpu::ThreadScope ts(threads);
    for (const PoolCase& c : cases) {
      INFO("N " << c.N << " C " << c.C << " H " << c.H << " W " << c.W << " k " << c.k << " s " << c.s << " p " << c.p
                << " dil " << c.dil << " ceil " << c.ceil << " threads " << threads);
      const std::vector<double> xv = pool_values(c.N * c.C * c.H * c.W, g);
      Tensor x = to_dtype(tensor_from<double>(xv, {c.N, c.C, c.H, c.W}), DType::bf16).set_requires_grad(true);
      Tensor xs = to_dtype(tensor_from<double>(xv, {c.N, c.C, c.H, c.W}), DType::bf16).set_requires_grad(true);
      op_trace_enable(true);
      op_trace_take();
      Tensor y = max_pool2d(x, {c.k}, {c.s}, {c.p}, {c.dil}, c.ceil);
      int64_t fwd_spans = 0, bwd_spans = 0, copies = 0;
      for (const OpSpan& sp : op_trace_take()) {
        const std::string name(sp.name);
        fwd_spans += name == "max_pool2d_forward_16", copies += name == "copy";
      }
      // the staged reference: f32 copy, the f32 kernel, rounded back
      Tensor ys = to_dtype(max_pool2d(to_dtype(xs, DType::f32), {c.k}, {c.s}, {c.p}, {c.dil}, c.ceil), DType::bf16);
      REQUIRE(y.dtype() == DType::bf16);
      REQUIRE(y.sizes() == ys.sizes());
      CHECK(bits_of(y) == bits_of(ys));
      std::vector<double> dyv(y.numel());
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      for (auto& v : dyv) v = (double)(float)bfloat16(u(g));
      for (size_t i = 3; i < dyv.size(); i += 53) dyv[i] = -0.0;  // the staged sum makes these +0
      for (size_t i = 7; i < dyv.size(); i += 71) dyv[i] = NAN;
      for (size_t i = 9; i < dyv.size(); i += 89) dyv[i] = -INFINITY;
      Tensor dy = to_dtype(tensor_from<double>(dyv, y.sizes()), DType::bf16);
      op_trace_take();
      y.backward(dy);
      for (const OpSpan& sp : op_trace_take()) {
        const std::string name(sp.name);
        bwd_spans += name == "max_pool2d_backward_16", copies += name == "copy";
      }
      op_trace_enable(false);
      ys.backward(to_dtype(tensor_from<double>(dyv, ys.sizes()), DType::bf16));
      CHECK(bits_of(x.grad()) == bits_of(xs.grad()));
      CHECK(fwd_spans == 1);
      CHECK(bwd_spans == 1);
      CHECK(copies == 0);  // no f32 staging
      // the test sees NaN and -inf outputs and nonzero gradients
      const std::vector<double> yo = y.to_vector<double>();
      int64_t nan = 0;
      for (double v : yo) nan += std::isnan(v);
      CHECK(nan > 0);
      int64_t nonzero = 0;
      for (double v : x.grad().to_vector<double>()) nonzero += v != 0;
      CHECK(nonzero > 0);
    }
  }
}

TEST_CASE("max_pool2d bf16 memory: meta requests == cpu requests") {
  for (int threads : {1, 2}) {
    cpu::ThreadScope ts(threads);
    for (const PoolCase& c : {PoolCase{4, 8, 28, 28, 2, 2, 0, 1, false}, PoolCase{2, 3, 11, 10, 3, 2, 1, 1, false}}) {
      INFO("H " << c.H << " k " << c.k << " threads " << threads);
      std::vector<int64_t> ev[2];
      int64_t peak[2] = {0, 0};
      for (int m = 0; m < 2; ++m) {
        const Device dev = m == 0 ? Device::cpu() : Device::meta();
        RequestRecorder rec(dev);
        {
          Tensor x = empty({c.N, c.C, c.H, c.W}, DType::bf16, dev);
          if (dev.is_cpu()) fill_(x, 0.5);
          x.set_requires_grad(true);
          Tensor y = relu(max_pool2d(x, {c.k}, {c.s}, {c.p}, {c.dil}, c.ceil));
          Tensor dy = empty(y.sizes(), DType::bf16, dev);
          if (dev.is_cpu()) fill_(dy, 1.0);
          y.backward(dy);
        }
        ev[m] = rec.events, peak[m] = rec.peak;
        CHECK(rec.live == 0);
      }
      CHECK(ev[0].size() > 4);
      CHECK(ev[1] == ev[0]);
      CHECK(peak[1] == peak[0]);
    }
  }
}
