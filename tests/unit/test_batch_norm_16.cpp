// The CPU's 16-bit training batch norm (engine/ops/nn_norm.cpp, kernels/cpu/batch_norm.h's *_16 kernels):
// bf16 / f16 x, y, dy, dx read and written directly must give the bits of the f32-staged composition
// (x copied to f32, the f32 op, y and dx rounded back) -- y, dx, dweight, dbias, the saved statistics
// through the running stats -- at every instruction-set level this CPU has, 1 and 2 threads, NCHW and
// channels-last, a run length that is no multiple of a vector width, a channel with a large mean against
// a small spread and a channel holding a NaN; and a meta run must make the CPU run's allocation requests.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/memory/allocator.h"
#include "engine/ops/op_trace.h"
#include "engine/ops/ops.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/threads.h"
#include "support/cpu_paths.h"

using namespace kiln;
using kiln::test::IsaGuard;
using kiln::test::RequestRecorder;
using cpu::CpuIsa;

namespace {

std::vector<CpuIsa> levels() {
  std::vector<CpuIsa> v = {CpuIsa::baseline};
  if ((int)cpu::cpu_isa_supported() >= (int)CpuIsa::avx2) v.push_back(CpuIsa::avx2);
  if ((int)cpu::cpu_isa_supported() >= (int)CpuIsa::avx512) v.push_back(CpuIsa::avx512);
  return v;
}

// The tensor's values as f32 bit patterns (exact for f16 / bf16 / f32).
std::vector<uint32_t> bits(const Tensor& t) {
  std::vector<float> v = to_dtype(contiguous(t), DType::f32).to_vector<float>();
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

// x: (N, C, H, W) values, channel 1 with mean 200 and spread 0.5 (exact in bf16 only to ~1: the
// kernels see the rounded values either way), channel 2 one NaN when `nan`.
std::vector<float> make_x(int64_t N, int64_t C, int64_t HW, bool nan, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.3f, 1.7f);
  std::vector<float> x((size_t)(N * C * HW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < HW; ++i) {
        float v = nd(rng);
        if (c == 1) v = 200.0f + 0.5f * v;
        x[(size_t)((n * C + c) * HW + i)] = v;
      }
  if (nan && C > 2) x[(size_t)(2 * HW + 3)] = std::numeric_limits<float>::quiet_NaN();
  return x;
}

struct Out {
  std::vector<uint32_t> y, dx, dw, db, rm, rv;
};

// One training batch norm forward + backward. staged: the f32 composition the 16-bit path replaces.
Out run_bn(DType dt, bool staged, bool channels_last, const std::vector<float>& xv, const std::vector<float>& gv,
           int64_t N, int64_t C, int64_t H, int64_t W) {
  const MemoryFormat fmt = channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous;
  Tensor x16 = contiguous(to_dtype(tensor_from(xv, {N, C, H, W}), dt), fmt);
  Tensor g16 = contiguous(to_dtype(tensor_from(gv, {N, C, H, W}), dt), fmt);
  std::vector<float> wv((size_t)C), bv((size_t)C);
  for (int64_t c = 0; c < C; ++c) wv[(size_t)c] = 0.75f + 0.125f * (float)c, bv[(size_t)c] = -0.5f + 0.25f * (float)c;
  Tensor w = tensor_from(wv, {C}), b = tensor_from(bv, {C});
  Tensor rm = tensor_from(std::vector<float>((size_t)C, 0.5f), {C}), rv = tensor_from(std::vector<float>((size_t)C, 2.0f), {C});
  w.set_requires_grad(true), b.set_requires_grad(true);
  Out o;
  if (staged) {
    Tensor xf = to_dtype(x16, DType::f32).detach();
    xf.set_requires_grad(true);
    Tensor yf = batch_norm(xf, w, b, rm, rv, true, 0.1, 1e-5);
    yf.backward(to_dtype(g16, DType::f32));
    o.y = bits(to_dtype(yf, dt));
    o.dx = bits(to_dtype(xf.grad(), dt));
  } else {
    Tensor x = x16.detach();
    x.set_requires_grad(true);
    Tensor y = batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5);
    REQUIRE(y.dtype() == dt);
    y.backward(g16);
    REQUIRE(x.grad().dtype() == dt);
    o.y = bits(y);
    o.dx = bits(x.grad());
  }
  o.dw = bits(w.grad()), o.db = bits(b.grad()), o.rm = bits(rm), o.rv = bits(rv);
  return o;
}

void bn_step(Device dev, DType dt, MemoryFormat fmt) {
  Tensor x = contiguous(empty({3, 6, 5, 7}, dt, dev), fmt);
  Tensor w = empty({6}, DType::f32, dev), b = empty({6}, DType::f32, dev);
  Tensor rm = empty({6}, DType::f32, dev), rv = empty({6}, DType::f32, dev);
  if (dev.is_cpu()) fill_(x, 0.5), fill_(w, 1.0), fill_(b, 0.0), fill_(rm, 0.0), fill_(rv, 1.0);
  x.set_requires_grad(true), w.set_requires_grad(true), b.set_requires_grad(true);
  Tensor y = relu(batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5));
  Tensor g = contiguous(empty(y.sizes(), dt, dev), fmt);
  if (dev.is_cpu()) fill_(g, 1.0);
  y.backward(g);
}

}  // namespace

TEST_CASE("batch_norm 16-bit CPU training: bf16 and f16 give the f32-staged bits at every ISA level and thread count") {
  std::mt19937 rng(35);
  const int64_t N = 3, C = 5, H = 7, W = 5;  // HW = 35: runs of 4 x 8 lanes + 3
  const std::vector<float> xv = make_x(N, C, H * W, true, rng);
  const std::vector<float> gv = make_x(N, C, H * W, false, rng);
  for (DType dt : {DType::bf16, DType::f16})
    for (bool cl : {false, true})
      for (CpuIsa isa : levels())
        for (int threads : {1, 2}) {
          IsaGuard guard(isa);
          cpu::ThreadScope ts(threads);
          INFO(dtype_name(dt) << (cl ? " channels-last" : " NCHW") << " isa " << cpu::cpu_isa_name(isa) << " threads "
                              << threads);
          op_trace_enable(true);
          op_trace_take();
          const Out direct = run_bn(dt, false, cl, xv, gv, N, C, H, W);
          const std::vector<OpSpan> spans = op_trace_take();
          op_trace_enable(false);
          // the direct kernels ran (not the staged path)
          int fwd16 = 0, bwd16 = 0;
          for (const OpSpan& s : spans) {
            fwd16 += std::string(s.name) == "batch_norm_forward_train_16";
            bwd16 += std::string(s.name) == "batch_norm_backward_train_16";
          }
          CHECK(fwd16 == 1);
          CHECK(bwd16 == 1);
          const Out staged = run_bn(dt, true, cl, xv, gv, N, C, H, W);
          CHECK(direct.y == staged.y);
          CHECK(direct.dx == staged.dx);
          CHECK(direct.dw == staged.dw);
          CHECK(direct.db == staged.db);
          CHECK(direct.rm == staged.rm);
          CHECK(direct.rv == staged.rv);
          // the NaN channel is NaN in y, the others finite
          const int64_t HW = H * W;
          std::vector<float> y(direct.y.size());
          std::memcpy(y.data(), direct.y.data(), y.size() * sizeof(float));
          if (!cl) {
            CHECK(std::isnan(y[(size_t)(2 * HW)]));
            CHECK(std::isfinite(y[0]));
            CHECK(std::isfinite(y[(size_t)HW]));
          }
        }
}

TEST_CASE("batch_norm 16-bit CPU training: a meta run makes the CPU run's allocation requests") {
  for (DType dt : {DType::bf16, DType::f16})
    for (MemoryFormat fmt : {MemoryFormat::contiguous, MemoryFormat::channels_last}) {
      INFO(dtype_name(dt) << (fmt == MemoryFormat::channels_last ? " channels-last" : " NCHW"));
      std::vector<int64_t> cpu_events, meta_events;
      int64_t cpu_peak = 0, meta_peak = 0;
      {
        RequestRecorder rec(Device::cpu());
        bn_step(Device::cpu(), dt, fmt);
        cpu_events = rec.events, cpu_peak = rec.peak;
        CHECK(rec.live == 0);
      }
      {
        RequestRecorder rec(Device::meta());
        bn_step(Device::meta(), dt, fmt);
        meta_events = rec.events, meta_peak = rec.peak;
        CHECK(rec.live == 0);
      }
      CHECK(cpu_events.size() > 6);
      CHECK(meta_events == cpu_events);
      CHECK(meta_peak == cpu_peak);
    }
}
