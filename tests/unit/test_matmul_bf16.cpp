// bf16 matmul / linear on the CPU (kernels/cpu/matmul_bf16.h through engine/ops/matmul.cpp): each bf16 path
// (onednn amx, onednn avx512_bf16, portable f32 staging) forced in its own ctest case (oneDNN takes its ISA
// once per process, bf16_path.h). linear's forward, input gradient and weight gradient, and a batched matmul
// with a broadcast operand, against an f64 reference with a derived bound, on K not a multiple of 16 / 32,
// M = 1, N = 1, K = 1 and the small CNN's fc1 / fc2; NaN / inf propagation; the op trace says which kernel
// ran (matmul_bf16 spans on oneDNN, none on the portable path); and a bf16 linear forward+backward on the
// meta device making exactly the CPU run's allocation requests (sequence and peak) at 1 and 2 threads.
// A case whose path this CPU (or build) lacks prints a SKIP line and passes; every case prints its path.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/core/error.h"
#include "engine/memory/allocator.h"
#include "engine/ops/op_trace.h"
#include "engine/ops/ops.h"
#include "kernels/cpu/bf16_path.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/matmul_bf16.h"
#include "kernels/cpu/threads.h"
#include "support/cpu_paths.h"

using namespace kiln;
using kiln::test::IsaGuard;
using kiln::test::bf16_level_for;
using kiln::test::RequestRecorder;
using cpu::Bf16Path;
using cpu::CpuIsa;

namespace {

// Random values exactly representable in bf16 (so only accumulation and output rounding differ).
std::vector<double> bf16_values(size_t n, std::mt19937& g) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<double> v(n);
  for (auto& x : v) x = (double)(float)bfloat16(u(g));
  return v;
}

// The bound: bf16 x bf16 products are exact in f32 (8 + 8 significand bits fit 24), L of them are added in
// f32 in some order (error <= L * 2^-24 * sum|terms| to first order; 2L leaves room for oneDNN's split of
// the reduction into blocks and the portable path's OpenBLAS), then the result is rounded once to bf16:
// |out - v| <= 2^-8 |v|. So |out - ref| <= 2^-8 |ref| + (1 + 2^-8) 2L 2^-24 sum|terms|. The inputs are
// exact bf16 values, so their own 2^-8 rounding is not in it; a dropped or doubled term, a wrong stride,
// truncation instead of rounding, or an f16/bf16 accumulation breaks it by far.
int64_t check_close(const std::vector<double>& out, const std::vector<double>& ref, const std::vector<double>& abs,
                    int64_t L, const char* what) {
  const double u = std::ldexp(1.0, -8);
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double tol = u * std::fabs(ref[i]) + (1 + u) * 2.0 * (double)L * std::ldexp(1.0, -24) * abs[i] + 1e-30;
    if (!(std::fabs(out[i] - ref[i]) <= tol) && bad++ < 3)
      MESSAGE(std::string(what) << "[" << i << "]: " << out[i] << " vs f64 " << ref[i] << " (bound " << tol << ")");
  }
  return bad;
}

// f64 C = A (M, K) B (K, N) and sum|terms|, all row-major; A(i, k) = a[i * sa_r + k * sa_c], likewise B.
void ref_mm(int64_t M, int64_t N, int64_t K, const std::vector<double>& a, int64_t sa_r, int64_t sa_c,
            const std::vector<double>& b, int64_t sb_r, int64_t sb_c, std::vector<double>& c, std::vector<double>& c_abs) {
  c.assign(M * N, 0), c_abs.assign(M * N, 0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k) {
      const double av = a[i * sa_r + k * sa_c];
      for (int64_t j = 0; j < N; ++j) {
        const double t = av * b[k * sb_r + j * sb_c];
        c[i * N + j] += t, c_abs[i * N + j] += std::fabs(t);
      }
    }
}

Tensor bf16_tensor(const std::vector<double>& v, Shape s, bool grad) {
  Tensor t = to_dtype(tensor_from<double>(v, s), DType::bf16);
  if (grad) t.set_requires_grad(true);
  return t;
}

int64_t onednn_spans() {
  int64_t n = 0;
  for (const OpSpan& s : op_trace_take()) n += std::string(s.name) == "matmul_bf16";
  return n;
}

// linear y = x w^T (x (M, K), w (N, K)) and its backward with dy (M, N): the three products of training.
void linear_case(Bf16Path p, int64_t M, int64_t K, int64_t N, std::mt19937& g) {
  INFO("linear M " << M << " K " << K << " N " << N);
  const std::vector<double> x = bf16_values(M * K, g), w = bf16_values(N * K, g), dy = bf16_values(M * N, g);
  std::vector<double> y, y_abs, dx, dx_abs, dw, dw_abs;
  ref_mm(M, N, K, x, K, 1, w, 1, K, y, y_abs);     // y = x w^T
  ref_mm(M, K, N, dy, N, 1, w, K, 1, dx, dx_abs);  // dx = dy w
  ref_mm(N, K, M, dy, 1, N, x, K, 1, dw, dw_abs);  // dw = dy^T x
  // oneDNN from M*N*K >= 65536 on at 1 thread, 2^20 above (the measured rule, kernels/cpu/matmul_bf16.cpp);
  // the same product size in all three passes. Smaller products stay on the f32 staging (kernel_case runs
  // them on oneDNN directly).
  CHECK(cpu::matmul_bf16_min_macs() == (cpu::num_threads() > 1 ? (1 << 20) : 65536));
  const bool onednn = p != Bf16Path::portable && M * N * K >= cpu::matmul_bf16_min_macs();
  cpu::MatmulBf16Desc fwd;  // what linear's forward asks for: x plain, w^T through a transpose flag
  fwd.M = M, fwd.N = N, fwd.K = K, fwd.trans_b = true, fwd.lda = K, fwd.ldb = K;
  CHECK(cpu::matmul_bf16_uses_onednn(fwd) == onednn);
  cpu::MatmulBf16Desc bwd_data;  // dx = dy w: both plain
  bwd_data.M = M, bwd_data.N = K, bwd_data.K = N, bwd_data.lda = N, bwd_data.ldb = K;
  cpu::MatmulBf16Desc bwd_weight;  // dw = dy^T x: dy through a transpose flag
  bwd_weight.M = N, bwd_weight.N = K, bwd_weight.K = M, bwd_weight.trans_a = true, bwd_weight.lda = N, bwd_weight.ldb = K;
  CHECK(cpu::matmul_bf16_uses_onednn(bwd_data) == onednn);
  CHECK(cpu::matmul_bf16_uses_onednn(bwd_weight) == onednn);
  if (onednn)
    MESSAGE("linear " << M << "x" << K << " -> " << N << ": forward " << std::string(cpu::matmul_bf16_impl_name(fwd))
                      << ", backward-data " << std::string(cpu::matmul_bf16_impl_name(bwd_data)) << ", backward-weights "
                      << std::string(cpu::matmul_bf16_impl_name(bwd_weight)));
  Tensor xt = bf16_tensor(x, {M, K}, true), wt = bf16_tensor(w, {N, K}, true);
  op_trace_enable(true);
  op_trace_take();
  Tensor yt = linear(xt, wt);
  REQUIRE(yt.dtype() == DType::bf16);
  yt.backward(bf16_tensor(dy, {M, N}, false));
  const int64_t spans = onednn_spans();
  op_trace_enable(false);
  CHECK(spans == (onednn ? 3 : 0));  // forward, input gradient, weight gradient
  REQUIRE(xt.grad().dtype() == DType::bf16);
  REQUIRE(wt.grad().dtype() == DType::bf16);
  CHECK(check_close(yt.to_vector<double>(), y, y_abs, K, "y") == 0);
  CHECK(check_close(xt.grad().to_vector<double>(), dx, dx_abs, N, "dx") == 0);
  CHECK(check_close(wt.grad().to_vector<double>(), dw, dw_abs, M, "dw") == 0);
}

// The kernel directly (below the op's size rule, so oneDNN itself is checked on tiny shapes): A (M, K) times
// B = W^T with W (N, K) (linear's forward), and A^T B with A stored (K, M) (the weight gradient's pattern).
void kernel_case(int64_t M, int64_t K, int64_t N, std::mt19937& g) {
  INFO("kernel M " << M << " K " << K << " N " << N);
  const std::vector<double> a = bf16_values(M * K, g), w = bf16_values(N * K, g);
  auto to_bf16 = [](const std::vector<double>& v) {
    std::vector<bfloat16> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = bfloat16((float)v[i]);
    return h;
  };
  const std::vector<bfloat16> ah = to_bf16(a), wh = to_bf16(w);
  auto run = [&](const cpu::MatmulBf16Desc& d) {
    std::vector<char> ws(cpu::matmul_bf16_workspace_bytes(d));
    std::vector<bfloat16> c((size_t)(d.M * d.N));
    cpu::matmul_bf16(d, ah.data(), wh.data(), c.data(), ws.data());
    return std::vector<double>(c.begin(), c.end());
  };
  std::vector<double> y, y_abs;
  cpu::MatmulBf16Desc fwd;
  fwd.M = M, fwd.N = N, fwd.K = K, fwd.trans_b = true, fwd.lda = K, fwd.ldb = K;
  ref_mm(M, N, K, a, K, 1, w, 1, K, y, y_abs);
  CHECK(check_close(run(fwd), y, y_abs, K, "kernel A W^T") == 0);
  // A^T W^T: A read as stored (K', M') = (M, K) -> op (K, M); W as (N, K) -> B^T; C (K, N) with reduction M.
  cpu::MatmulBf16Desc tt;
  tt.M = K, tt.N = N, tt.K = M, tt.trans_a = true, tt.trans_b = true, tt.lda = K, tt.ldb = M;
  if (M == K) {  // W^T is (K, N) only when W's columns (K) equal the reduction (M)
    ref_mm(K, N, M, a, 1, K, w, 1, K, y, y_abs);
    CHECK(check_close(run(tt), y, y_abs, M, "kernel A^T W^T") == 0);
  }
}

// Batched a (B, M, K) @ b (K, N) (b broadcast over the batch: a stride of 0), with a given as a transposed
// view (stored (B, K, M)), and its backward: da = dy b^T per batch, db = sum over the batch of a^T dy.
void batched_case(Bf16Path p, std::mt19937& g) {
  const int64_t B = 3, M = 21, K = 101, N = 33;  // M*N*K 69993 per matrix: above the 1-thread rule
  const std::vector<double> at = bf16_values(B * K * M, g), b = bf16_values(K * N, g), dy = bf16_values(B * M * N, g);
  std::vector<double> y, da, dbv(K * N, 0), db_abs(K * N, 0);
  std::vector<double> y_abs, da_abs;
  for (int64_t i = 0; i < B; ++i) {
    std::vector<double> ai(at.begin() + i * K * M, at.begin() + (i + 1) * K * M);  // (K, M): A(m, k) = ai[k*M + m]
    std::vector<double> dyi(dy.begin() + i * M * N, dy.begin() + (i + 1) * M * N), c, c_abs;
    ref_mm(M, N, K, ai, 1, M, b, N, 1, c, c_abs);
    y.insert(y.end(), c.begin(), c.end()), y_abs.insert(y_abs.end(), c_abs.begin(), c_abs.end());
    ref_mm(M, K, N, dyi, N, 1, b, 1, N, c, c_abs);  // da = dy b^T, (M, K)
    std::vector<double> dat(K * M), dat_abs(K * M);  // stored as the view: (K, M)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) dat[k * M + m] = c[m * K + k], dat_abs[k * M + m] = c_abs[m * K + k];
    da.insert(da.end(), dat.begin(), dat.end()), da_abs.insert(da_abs.end(), dat_abs.begin(), dat_abs.end());
    ref_mm(K, N, M, ai, M, 1, dyi, N, 1, c, c_abs);  // a^T dy, (K, N)
    for (int64_t j = 0; j < K * N; ++j) dbv[j] += c[j], db_abs[j] += c_abs[j];
  }
  Tensor a_store = bf16_tensor(at, {B, K, M}, true), bt = bf16_tensor(b, {K, N}, true);
  op_trace_enable(true);
  op_trace_take();
  Tensor yt = matmul(transpose(a_store, 1, 2), bt);
  REQUIRE(yt.dtype() == DType::bf16);
  yt.backward(bf16_tensor(dy, {B, M, N}, false));
  const int64_t spans = onednn_spans();
  op_trace_enable(false);
  CHECK(spans == (p != Bf16Path::portable && M * N * K >= cpu::matmul_bf16_min_macs() ? 3 : 0));
  CHECK(check_close(yt.to_vector<double>(), y, y_abs, K, "batched y") == 0);
  CHECK(check_close(a_store.grad().to_vector<double>(), da, da_abs, N, "batched da") == 0);
  // db: per batch a bf16 product c_i (L = M, rounded: |c_i - ref_i| <= 2^-8 |ref_i| + ...), then the batch sum
  // (sum_to: f32 accumulation, rounded once to bf16). sum_i |ref_i| <= sum|terms|, so |db - ref| <=
  // 2^-8 sum|terms| (the B roundings) + 2^-8 |ref| (the last) + the f32 sums, (1 + 2^-7) covering the
  // second-order terms.
  const std::vector<double> got = bt.grad().to_vector<double>();
  int64_t bad = 0;
  for (size_t j = 0; j < dbv.size(); ++j) {
    const double tol = std::ldexp(1.0, -8) * (db_abs[j] + std::fabs(dbv[j])) * (1 + std::ldexp(1.0, -7)) +
                       2.0 * (double)(B + M) * std::ldexp(1.0, -24) * db_abs[j] + 1e-30;
    if (!(std::fabs(got[j] - dbv[j]) <= tol) && bad++ < 3) MESSAGE("batched db[" << j << "]: " << got[j] << " vs " << dbv[j]);
  }
  CHECK(bad == 0);
}

enum class Cls { finite, nan, pos_inf, neg_inf };
Cls cls(double v) { return std::isnan(v) ? Cls::nan : std::isinf(v) ? (v > 0 ? Cls::pos_inf : Cls::neg_inf) : Cls::finite; }

// NaN and +-inf in x reach exactly the outputs and weight-gradient entries whose sums take them (f64 says which).
void nonfinite_case() {
  std::mt19937 g(36);
  const int64_t M = 4, K = 193, N = 97;  // M*N*K 74884: above the 1-thread rule
  std::vector<double> x = bf16_values(M * K, g), w = bf16_values(N * K, g), dy = bf16_values(M * N, g);
  x[3] = NAN, x[K + 5] = INFINITY, x[2 * K + 5] = -INFINITY, x[3 * K + 8] = INFINITY;
  std::vector<double> y, y_abs, dw, dw_abs;
  ref_mm(M, N, K, x, K, 1, w, 1, K, y, y_abs);
  ref_mm(N, K, M, dy, 1, N, x, K, 1, dw, dw_abs);
  Tensor xt = bf16_tensor(x, {M, K}, true), wt = bf16_tensor(w, {N, K}, true);
  Tensor yt = linear(xt, wt);
  yt.backward(bf16_tensor(dy, {M, N}, false));
  const std::vector<double> yo = yt.to_vector<double>(), dwo = wt.grad().to_vector<double>();
  int64_t nonfinite = 0, mismatched = 0;
  for (size_t i = 0; i < y.size(); ++i) nonfinite += cls(y[i]) != Cls::finite, mismatched += cls(yo[i]) != cls(y[i]);
  for (size_t i = 0; i < dw.size(); ++i) nonfinite += cls(dw[i]) != Cls::finite, mismatched += cls(dwo[i]) != cls(dw[i]);
  CHECK(nonfinite >= 3 * N);  // the test sees something: every row of x has a non-finite value
  CHECK(mismatched == 0);
}

void path_case(Bf16Path p, const char* name) {
  CpuIsa level;
  if (!bf16_level_for(p, name, &level)) return;
  IsaGuard guard(level);
  REQUIRE(cpu::bf16_path() == p);
  for (int threads : {1, 2}) {
    cpu::ThreadScope ts(threads);
    MESSAGE(std::string(name) << ": " << cpu::cpu_model_name() << ", isa " << std::string(cpu::cpu_isa_name(level))
                              << ", bf16 matmul path " << std::string(cpu::bf16_path_name(cpu::bf16_path()))
                              << ", oneDNN " << cpu::onednn_version() << ", " << threads << " thread(s)");
    std::mt19937 g(35);
    // (M, K, N): K not a multiple of 16 / 32, M = 1, N = 1, K = 1, the small CNN's fc1 and fc2 at batch 16.
    // (M, K, N) through linear: K not a multiple of 16 / 32, M = 1, N = 1, K = 1 above the size rule; the
    // small CNN's fc1 (batch 16) and fc2 (batch 16: below the rule, f32 staging) and another small product.
    for (auto s : {std::vector<int64_t>{1, 3137, 129}, {70, 1001, 1}, {300, 1, 300}, {33, 65, 47}, {16, 3136, 128},
                   {16, 128, 10}, {5, 37, 7}})
      linear_case(p, s[0], s[1], s[2], g);
    // oneDNN's kernel directly on products below the rule: K not a multiple of 16 / 32, M = 1, N = 1, K = 1.
    if (p != Bf16Path::portable)
      for (auto s : {std::vector<int64_t>{5, 37, 7}, {1, 50, 9}, {6, 33, 1}, {3, 1, 4}, {17, 17, 3}})
        kernel_case(s[0], s[1], s[2], g);
    batched_case(p, g);
    nonfinite_case();
  }
}

// A bf16 linear forward + backward (bias, a ReLU after it, as fc1 under autocast) on `dev`.
void linear_step(Device dev, int64_t M, int64_t K, int64_t N) {
  Tensor x = empty({M, K}, DType::bf16, dev), w = empty({N, K}, DType::bf16, dev), b = empty({N}, DType::bf16, dev);
  if (dev.is_cpu()) fill_(x, 0.5), fill_(w, 0.25), fill_(b, 0.0);
  x.set_requires_grad(true), w.set_requires_grad(true), b.set_requires_grad(true);
  Tensor y = relu(linear(x, w, b));
  Tensor g = empty(y.sizes(), DType::bf16, dev);
  if (dev.is_cpu()) fill_(g, 1.0);
  y.backward(g);
}

void memory_case(Bf16Path p, const char* name) {
  CpuIsa level;
  if (!bf16_level_for(p, name, &level)) return;
  IsaGuard guard(level);
  REQUIRE(cpu::bf16_path() == p);
  for (int threads : {1, 2})
    for (auto s : {std::vector<int64_t>{16, 3136, 128}, {128, 3136, 128}, {7, 33, 5}}) {
      cpu::ThreadScope ts(threads);
      INFO("M " << s[0] << " K " << s[1] << " N " << s[2] << " threads " << threads);
      const bool onednn = p != Bf16Path::portable && s[0] * s[1] * s[2] >= cpu::matmul_bf16_min_macs();  // 7x33x5: staging
      cpu::MatmulBf16Desc fwd;
      fwd.M = s[0], fwd.N = s[2], fwd.K = s[1], fwd.trans_b = true, fwd.lda = s[1], fwd.ldb = s[1];
      CHECK(cpu::matmul_bf16_uses_onednn(fwd) == onednn);
      const size_t ws = onednn ? cpu::matmul_bf16_workspace_bytes(fwd) : 0;
      if (onednn) MESSAGE(std::string(name) << ": linear " << s[0] << "x" << s[1] << " -> " << s[2] << ", " << threads
                                            << " thread(s): forward workspace " << ws << " B");
      std::vector<int64_t> cpu_events, meta_events;
      int64_t cpu_peak = 0, meta_peak = 0;
      {
        RequestRecorder rec(Device::cpu());
        linear_step(Device::cpu(), s[0], s[1], s[2]);
        cpu_events = rec.events, cpu_peak = rec.peak;
        CHECK(rec.live == 0);
      }
      {
        RequestRecorder rec(Device::meta());
        linear_step(Device::meta(), s[0], s[1], s[2]);
        meta_events = rec.events, meta_peak = rec.peak;
        CHECK(rec.live == 0);
      }
      // The forward's workspace is among the requests (the test sees the oneDNN path's allocations).
      if (onednn) CHECK(std::find(cpu_events.begin(), cpu_events.end(), (int64_t)ws) != cpu_events.end());
      CHECK(cpu_events.size() > 6);
      CHECK(meta_events == cpu_events);
      CHECK(meta_peak == cpu_peak);
    }
}

}  // namespace

TEST_CASE("matmul bf16 path onednn amx: linear and matmul against f64") { path_case(Bf16Path::onednn_amx, "onednn amx"); }
TEST_CASE("matmul bf16 path onednn avx512_bf16: linear and matmul against f64") {
  path_case(Bf16Path::onednn_avx512_bf16, "onednn avx512_bf16");
}
TEST_CASE("matmul bf16 path portable: linear and matmul against f64") { path_case(Bf16Path::portable, "portable"); }

TEST_CASE("matmul bf16 memory onednn amx: meta requests == cpu requests") { memory_case(Bf16Path::onednn_amx, "onednn amx"); }
TEST_CASE("matmul bf16 memory onednn avx512_bf16: meta requests == cpu requests") {
  memory_case(Bf16Path::onednn_avx512_bf16, "onednn avx512_bf16");
}
TEST_CASE("matmul bf16 memory portable: meta requests == cpu requests") { memory_case(Bf16Path::portable, "portable"); }
