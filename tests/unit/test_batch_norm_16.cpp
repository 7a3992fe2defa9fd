// The CPU's 16-bit training batch norm (engine/ops/nn_norm.cpp, kernels/cpu/batch_norm.h's *_16 kernels, their
// f32 lanes in kernels/cpu/batch_norm_channel16.h): bf16 / f16 x, y, dy, dx read and written directly, the sums
// and outputs in f32 lanes. Checked against an f64 reference with bounds derived from the kernels' arithmetic
// (u = 2^-24; each f32 lane adds at most 64 values before they go to double lanes, so a sum over any M has
// |error| <= 63u * sum|terms| plus double rounding; see ref_bounds below): the saved mean and invstd, the
// running stats, dweight, dbias within those bounds, y and dx within 1 ulp of X plus the f32 error bound
// (f32's error is ~2^-16 of X's spacing: the results differ from the exact value's rounding only on a
// rounding boundary). Adversarial channels: NaN, +inf, -0 and zeros, constant, a mean of 1000 against a
// spread of 0.2, mixed magnitudes, HW not a multiple of the 16 lanes, M = 2 and ~100k values; M = 1 is an
// error (HW < 32 but HW > 1 takes the double loops: the same bounds hold; HW = 1, channels-last rows, takes
// batch_norm_rows16.inc's f32 lanes, one channel per lane, the same bounds, C not a multiple of 16 included). Every
// instruction-set level this CPU has and 1 / 2 threads give the same bits; the op's direct kernels run in
// NCHW and channels-last; a meta run makes the CPU run's allocation requests.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/core/half.h"
#include "engine/memory/allocator.h"
#include "engine/ops/op_trace.h"
#include "engine/ops/ops.h"
#include "kernels/cpu/batch_norm.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/threads.h"
#include "support/cpu_paths.h"

using namespace kiln;
using kiln::test::IsaGuard;
using kiln::test::RequestRecorder;
using cpu::CpuIsa;

namespace {

constexpr double kU = 1.0 / 16777216.0;  // 2^-24, f32's unit roundoff

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

// The spacing of X's values at magnitude a (its ulp; the subnormal spacing below the normal range).
template <typename X>
double ulp_of(double a) {
  const int mant = std::is_same_v<X, bfloat16> ? 7 : 10;
  const int emin = std::is_same_v<X, bfloat16> ? -126 : -14;
  int e = a > 0 && std::isfinite(a) ? std::ilogb(a) : emin;
  if (e < emin) e = emin;
  return std::ldexp(1.0, e - mant);
}

// The f64 reference of one channel layout (N, C, HW): forward statistics and y; backward from given (f32)
// saved statistics. The sums of |terms| feed the bounds.
struct RefForward {
  std::vector<double> mean, var, invstd, y, abs_mean, q;  // q: mean of (x - mean_f32)^2 (the kernels' centred pass)
};
RefForward ref_forward(int64_t N, int64_t C, int64_t HW, const std::vector<double>& x, const std::vector<float>& g,
                       const std::vector<float>& b, double eps) {
  RefForward r;
  const double M = (double)(N * HW);
  r.mean.assign((size_t)C, 0), r.var.assign((size_t)C, 0), r.invstd.assign((size_t)C, 0);
  r.abs_mean.assign((size_t)C, 0), r.q.assign((size_t)C, 0), r.y.assign(x.size(), 0);
  for (int64_t c = 0; c < C; ++c) {
    double s = 0, a = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) s += x[(size_t)((n * C + c) * HW + i)], a += std::fabs(x[(size_t)((n * C + c) * HW + i)]);
    const double mean = s / M, mf = (double)(float)mean;
    double v = 0, q = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        const double xv = x[(size_t)((n * C + c) * HW + i)];
        v += (xv - mean) * (xv - mean), q += (xv - mf) * (xv - mf);
      }
    r.mean[(size_t)c] = mean, r.var[(size_t)c] = v / M, r.abs_mean[(size_t)c] = a / M, r.q[(size_t)c] = q / M;
    r.invstd[(size_t)c] = 1.0 / std::sqrt(v / M + eps);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        const size_t j = (size_t)((n * C + c) * HW + i);
        r.y[j] = (x[j] - mean) * ((double)g[(size_t)c] * r.invstd[(size_t)c]) + (double)b[(size_t)c];
      }
  }
  return r;
}

// The bounds (derivations in the comments) of one forward: the saved mean, the saved invstd, y.
struct FwdBounds {
  double mean, invstd;
};
FwdBounds fwd_bounds(const RefForward& r, int64_t c, double eps) {
  FwdBounds fb;
  // mean: the lane sum's 63u * sum|x| (+ double rounding), then rounded to f32 (u |mean|)
  fb.mean = 64 * kU * r.abs_mean[(size_t)c] + kU * std::fabs(r.mean[(size_t)c]);
  // var: sum d^2 over d = x - mean_f32 with each term within 3u and the lane sum's 63u: 66u * q; the
  // correction (sum d)^2 / M with |sum d| <= M |mean - mean_f32| + 64u sum|d| and sum|d| <= M sqrt(q): its
  // error <= 2 * 64u * q (|mean - mean_f32| <= sqrt(q)); so |dvar| <= 200u * q. invstd = (var + eps)^-1/2:
  // half the relative error of var + eps, plus sqrt, divide and the f32 rounding (3u).
  const double dvar = 200 * kU * r.q[(size_t)c];
  fb.invstd = (0.5 * dvar / (r.var[(size_t)c] + eps) + 3 * kU) * r.invstd[(size_t)c];
  return fb;
}

template <typename X>
std::vector<double> widen(const std::vector<X>& v) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = (double)(float)v[i];
  return d;
}

// y or dx of the kernel against the reference: NaN where the reference is NaN, else within
// err + 1 ulp of X at the reference's magnitude (plus err). Returns the largest |kiln - ref| / ulp seen.
template <typename X>
double check_close(const char* what, const std::vector<X>& got, const std::vector<double>& ref,
                   const std::vector<double>& err, size_t* worst_at = nullptr) {
  double worst = 0;
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double k = (double)(float)got[i];
    if (std::isnan(ref[i])) {
      if (!std::isnan(k) && bad++ < 5) FAIL_CHECK(what << "[" << i << "]: " << k << ", reference NaN");
      continue;
    }
    const double ulp = ulp_of<X>(std::fabs(ref[i]) + err[i]);
    const double d = std::fabs(k - ref[i]);
    if (d / ulp > worst && worst_at) *worst_at = i;
    worst = std::max(worst, d / ulp);
    if (!(d <= err[i] + ulp) && bad++ < 5)
      FAIL_CHECK(what << "[" << i << "]: kiln " << k << " reference " << ref[i] << " |diff| " << d << " > bound "
                      << err[i] + ulp);
  }
  CHECK(bad == 0);
  return worst;
}

// One channel-layout case of the kernels: x and dy as X, forward + backward at every ISA level and 1 / 2
// threads (same bits), then against the f64 reference.
struct KernelCase {
  const char* name;
  int64_t N, C, HW;
  std::vector<float> x, dy;  // (N, C, HW), rounded to X by the case runner
};

template <typename X>
void run_kernel_case(const KernelCase& kc) {
  const int64_t N = kc.N, C = kc.C, HW = kc.HW, M = N * HW;
  const double eps = 1e-5, momentum = 0.1;
  std::vector<X> x(kc.x.size()), dy(kc.dy.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = X(kc.x[i]), dy[i] = X(kc.dy[i]);
  std::vector<float> g((size_t)C), b((size_t)C);
  for (int64_t c = 0; c < C; ++c) g[(size_t)c] = 0.75f + 0.125f * (float)c, b[(size_t)c] = -0.5f + 0.25f * (float)c;
  struct Result {
    std::vector<X> y, dx;
    std::vector<float> sm, si, rm, rv, dg, db;
  };
  auto run = [&]() {
    Result r;
    r.y.resize(x.size()), r.dx.resize(x.size());
    r.sm.resize((size_t)C), r.si.resize((size_t)C), r.dg.resize((size_t)C), r.db.resize((size_t)C);
    r.rm.assign((size_t)C, 0.5f), r.rv.assign((size_t)C, 2.0f);
    cpu::batch_norm_forward_train_16<X>(N, C, HW, x.data(), g.data(), b.data(), eps, r.y.data(), r.sm.data(),
                                        r.si.data(), r.rm.data(), r.rv.data(), momentum);
    cpu::batch_norm_backward_train_16<X>(N, C, HW, dy.data(), x.data(), g.data(), r.sm.data(), r.si.data(),
                                         r.dx.data(), r.dg.data(), r.db.data());
    return r;
  };
  auto same_bits = [](const auto& a, const auto& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
  };
  Result first;
  bool have = false;
  for (CpuIsa isa : levels())
    for (int threads : {1, 2}) {
      IsaGuard guard(isa);
      cpu::ThreadScope ts(threads);
      const Result r = run();
      if (!have) {
        first = r, have = true;
        continue;
      }
      INFO("isa " << cpu::cpu_isa_name(isa) << " threads " << threads);
      CHECK(same_bits(r.y, first.y));
      CHECK(same_bits(r.dx, first.dx));
      CHECK(same_bits(r.sm, first.sm));
      CHECK(same_bits(r.si, first.si));
      CHECK(same_bits(r.rm, first.rm));
      CHECK(same_bits(r.rv, first.rv));
      CHECK(same_bits(r.dg, first.dg));
      CHECK(same_bits(r.db, first.db));
    }
  const Result& k = first;
  // forward against the f64 reference
  const std::vector<double> xd = widen(x), dyd = widen(dy);
  const RefForward ref = ref_forward(N, C, HW, xd, g, b, eps);
  std::vector<double> yerr(x.size(), 0), dx_ref(x.size(), 0), dxerr(x.size(), 0);
  for (int64_t c = 0; c < C; ++c) {
    const size_t cc = (size_t)c;
    INFO("channel " << c);
    if (std::isnan(ref.mean[cc]) || std::isnan(ref.var[cc])) {
      CHECK(std::isnan(k.si[cc]));
      CHECK(std::isnan(k.rv[cc]));
    } else {
      const FwdBounds fb = fwd_bounds(ref, c, eps);
      CHECK(std::fabs((double)k.sm[cc] - ref.mean[cc]) <= fb.mean);
      CHECK(std::fabs((double)k.si[cc] - ref.invstd[cc]) <= fb.invstd);
      // running stats: momentum times the statistics' bounds, plus their own f32 rounding
      const double rm_ref = 0.9 * 0.5 + 0.1 * ref.mean[cc];
      const double rv_ref = 0.9 * 2.0 + 0.1 * ref.var[cc] * (double)M / (double)(M - 1);
      CHECK(std::fabs((double)k.rm[cc] - rm_ref) <= 0.1 * fb.mean + 2 * kU * std::fabs(rm_ref));
      CHECK(std::fabs((double)k.rv[cc] - rv_ref) <=
            0.1 * 200 * kU * ref.q[cc] * (double)M / (double)(M - 1) + 2 * kU * std::fabs(rv_ref));
      // y = (x - mean_f32) * k_f32 + b_f32: the mean's and invstd's bounds carried through, and four f32
      // roundings (x - mean, k, the product, + b) of the terms' magnitudes
      const double kk = std::fabs((double)g[cc] * ref.invstd[cc]);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < HW; ++i) {
          const size_t j = (size_t)((n * C + c) * HW + i);
          const double d = std::fabs(xd[j] - ref.mean[cc]);
          yerr[j] = 1.01 * (kk * fb.mean + d * std::fabs((double)g[cc]) * fb.invstd) +
                    4 * kU * (d * kk + std::fabs((double)b[cc])) + 4 * kU * kk * fb.mean;
        }
    }
    // backward from kiln's saved (f32) statistics, reference in f64
    const double m = (double)k.sm[cc], s = (double)k.si[cc], gk = (double)g[cc] * s;
    double a = 0, bs = 0, aa = 0, ba = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        const size_t j = (size_t)((n * C + c) * HW + i);
        a += dyd[j], bs += dyd[j] * (xd[j] - m), aa += std::fabs(dyd[j]), ba += std::fabs(dyd[j] * (xd[j] - m));
      }
    if (std::isnan(bs) || std::isnan(s)) {
      if (std::isnan(bs)) CHECK(std::isnan(k.dg[cc]));
    } else {
      // dbias: the lane sum's 63u * sum|dy| and its f32 rounding; dweight: the products' 2u more, times invstd
      CHECK(std::fabs((double)k.db[cc] - a) <= 64 * kU * aa + kU * std::fabs(a));
      CHECK(std::fabs((double)k.dg[cc] - bs * s) <= 66 * kU * ba * std::fabs(s) + 2 * kU * std::fabs(bs * s));
    }
    // dx = k ((dy - mean_dy) - (x - m) proj): the sums' errors over M (<= 66u of sum|.|/M), k, mean_dy, proj
    // rounded to f32, five f32 operations: <= |k| 80u (|dy| + sum|dy| / M + |x - m| sum|dy (x - m)| s^2 / M)
    const double G = aa / (double)M, P = ba * s * s / (double)M;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        const size_t j = (size_t)((n * C + c) * HW + i);
        dx_ref[j] = gk * (dyd[j] - a / (double)M - (xd[j] - m) * bs * s * s / (double)M);
        dxerr[j] = std::fabs(gk) * 80 * kU * (std::fabs(dyd[j]) + G + std::fabs(xd[j] - m) * P);
      }
  }
  size_t ay = 0, adx = 0;
  const double wy = check_close("y", k.y, ref.y, yerr, &ay);
  const double wdx = check_close("dx", k.dx, dx_ref, dxerr, &adx);
  MESSAGE(std::string(kc.name) << " (" << N << ", " << C << ", " << HW << ") "
                               << std::string(std::is_same_v<X, bfloat16> ? "bf16" : "f16") << ": largest |y - ref| " << wy
                               << " ulp (channel " << (ay / (size_t)HW) % (size_t)C << "), |dx - ref| " << wdx
                               << " ulp (channel " << (adx / (size_t)HW) % (size_t)C << ")");
}

// x: (N, C, HW) with channel kinds by c % 8: 0 normal(0.3, 1.7); 1 mean 1000, spread 0.2; 2 constant 0.75;
// 3 a NaN; 4 a +inf; 5 zeros and -0; 6 magnitudes 1e-3 .. 1e3 of both signs; 7 normal(-2, 0.01).
std::vector<float> adversarial(int64_t N, int64_t C, int64_t HW, std::mt19937& rng, bool nonfinite) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(-3.0f, 3.0f);
  std::vector<float> x((size_t)(N * C * HW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < HW; ++i) {
        float v = 0;
        switch (c % 8) {
          case 0: v = 0.3f + 1.7f * nd(rng); break;
          case 1: v = 1000.0f + 0.2f * nd(rng); break;
          case 2: v = 0.75f; break;
          case 5: v = (i % 2) ? -0.0f : 0.0f; break;
          case 6: v = (nd(rng) < 0 ? -1.0f : 1.0f) * std::pow(10.0f, ud(rng)); break;
          case 7: v = -2.0f + 0.01f * nd(rng); break;
          default: v = nd(rng); break;
        }
        x[(size_t)((n * C + c) * HW + i)] = v;
      }
  if (nonfinite) {
    const int64_t last = N * HW - 1;  // the channel's last value: the tail lanes when HW % 32 != 0
    for (int64_t c = 3; c < C; c += 8) x[(size_t)(((last / HW) * C + c) * HW + last % HW)] = std::numeric_limits<float>::quiet_NaN();
    for (int64_t c = 4; c < C; c += 8) x[(size_t)c * HW] = std::numeric_limits<float>::infinity();
  }
  return x;
}

}  // namespace

TEST_CASE("batch_norm 16-bit CPU kernels: f32 lanes against an f64 reference on adversarial channels, every ISA level and thread count the same bits") {
  std::mt19937 rng(35);
  struct Shape {
    const char* name;
    int64_t N, C, HW;
  };
  for (const Shape sh : {Shape{"HW 35", 3, 8, 35}, Shape{"HW 1", 5, 8, 1}, Shape{"HW 33", 2, 8, 33},
                         Shape{"M 2", 2, 8, 1}, Shape{"HW 4 (a 2x2 plane)", 32, 8, 4}, Shape{"HW 49 (7x7)", 4, 8, 49},
                         Shape{"M 100352 (8x112x112)", 8, 8, 12544},
                         // rows (channels-last, batch_norm_rows16.inc): C 40 = two vectors and a tail of 8
                         // channels, an odd M (the last row alone), one part; M 1501 in 2 parts of the rows
                         // (an odd one), C 72 = blocks of 64 + 8 channels (tasks part-major: 2 threads take
                         // rows, not blocks); M 9001 in 2 parts over many 64-pair flushes, C 72; M 40000 in 8
                         // parts, C 20
                         Shape{"rows: M 301, C 40", 301, 40, 1}, Shape{"rows: M 1501, C 72", 1501, 72, 1},
                         Shape{"rows: M 9001, C 72", 9001, 72, 1}, Shape{"rows: M 40000, C 20", 40000, 20, 1}}) {
    KernelCase kc{sh.name, sh.N, sh.C, sh.HW, adversarial(sh.N, sh.C, sh.HW, rng, true), {}};
    // dy: normal, with a -0, and one NaN in channel 3's gradient too
    kc.dy = adversarial(sh.N, sh.C, sh.HW, rng, false);
    for (size_t i = 0; i < kc.dy.size(); ++i)
      if ((i / (size_t)sh.HW) % 8 == 1) kc.dy[i] = 0.01f * kc.dy[i] - 10.0f;  // a gradient with a large mean
    INFO(sh.name);
    run_kernel_case<bfloat16>(kc);
    run_kernel_case<half>(kc);
  }
}

// A run's tail (HW % 16 values) is loaded as 16 values wherever the tensor has 16 more, its lanes from the
// tail's end on replaced by the pad (batch_norm_channel16.h's load_tail); the tensor's last run takes the
// tail value by value. Channel 1 between two channels of NaN (x) and inf (dy) must give the bits it gives
// alone, where only finite values of its own next run (or nothing) follow its tails.
template <typename X>
void check_tail_isolated(int64_t N, int64_t HW, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t C = 3;
  std::vector<X> x((size_t)(N * C * HW)), dy(x.size()), x1((size_t)(N * HW)), dy1(x1.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < HW; ++i) {
        const size_t j = (size_t)((n * C + c) * HW + i);
        if (c != 1) {
          x[j] = X(std::numeric_limits<float>::quiet_NaN()), dy[j] = X(std::numeric_limits<float>::infinity());
          continue;
        }
        x[j] = X(0.5f + nd(rng)), dy[j] = X(nd(rng));
        x1[(size_t)(n * HW + i)] = x[j], dy1[(size_t)(n * HW + i)] = dy[j];
      }
  const float g[3] = {1.0f, 1.25f, 1.0f}, b[3] = {0.0f, -0.5f, 0.0f};
  float sm[3], si[3], rm[3] = {0.5f, 0.5f, 0.5f}, rv[3] = {2.0f, 2.0f, 2.0f}, dg[3], db[3];
  float sm1, si1, rm1 = 0.5f, rv1 = 2.0f, dg1, db1;
  std::vector<X> y(x.size()), dx(x.size()), y1(x1.size()), dx1(x1.size());
  cpu::batch_norm_forward_train_16<X>(N, C, HW, x.data(), g, b, 1e-5, y.data(), sm, si, rm, rv, 0.1);
  cpu::batch_norm_backward_train_16<X>(N, C, HW, dy.data(), x.data(), g, sm, si, dx.data(), dg, db);
  cpu::batch_norm_forward_train_16<X>(N, 1, HW, x1.data(), g + 1, b + 1, 1e-5, y1.data(), &sm1, &si1, &rm1, &rv1,
                                      0.1);
  cpu::batch_norm_backward_train_16<X>(N, 1, HW, dy1.data(), x1.data(), g + 1, &sm1, &si1, dx1.data(), &dg1, &db1);
  auto bits = [](float v) {
    uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    return u;
  };
  CHECK(std::isfinite(sm1));
  CHECK(std::isfinite(dg1));
  CHECK(bits(sm[1]) == bits(sm1));
  CHECK(bits(si[1]) == bits(si1));
  CHECK(bits(rm[1]) == bits(rm1));
  CHECK(bits(rv[1]) == bits(rv1));
  CHECK(bits(dg[1]) == bits(dg1));
  CHECK(bits(db[1]) == bits(db1));
  int64_t differ = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < HW; ++i) {
      const size_t j = (size_t)((n * C + 1) * HW + i), j1 = (size_t)(n * HW + i);
      differ += std::memcmp(&y[j], &y1[j1], sizeof(X)) != 0;
      differ += std::memcmp(&dx[j], &dx1[j1], sizeof(X)) != 0;
    }
  CHECK(differ == 0);
}

TEST_CASE("batch_norm 16-bit CPU kernels: a run's tail loaded whole takes nothing from the values after it") {
  std::mt19937 rng(7);
  cpu::ThreadScope ts(1);  // the per-run arithmetic does not depend on the thread count (the test above)
  for (int64_t HW : {35, 49, 196, 47}) {
    INFO("HW " << HW);
    for (CpuIsa isa : levels()) {
      IsaGuard guard(isa);
      INFO("isa " << cpu::cpu_isa_name(isa));
      check_tail_isolated<bfloat16>(4, HW, rng);
      check_tail_isolated<half>(4, HW, rng);
    }
  }
}

TEST_CASE("batch_norm 16-bit CPU kernels: one value per channel is an error naming the op and shape") {
  std::vector<bfloat16> x(3, bfloat16(1.0f)), y(3);
  std::vector<float> g(3, 1.0f), b(3, 0.0f), sm(3), si(3);
  try {
    cpu::batch_norm_forward_train_16<bfloat16>(1, 3, 1, x.data(), g.data(), b.data(), 1e-5, y.data(), sm.data(),
                                               si.data(), nullptr, nullptr, 0.1);
    FAIL("no error for 1 value per channel");
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(m.find("batch_norm_forward_train_16") != std::string::npos);
    CHECK(m.find("more than 1 value per channel") != std::string::npos);
    CHECK(m.find("(1, 3, 1)") != std::string::npos);
  }
}

namespace {

struct Out {
  std::vector<uint32_t> y, dx, dw, db, rm, rv;
};

// One training batch norm forward + backward through the op.
Out run_bn(DType dt, bool channels_last, const std::vector<float>& xv, const std::vector<float>& gv,
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
  Tensor x = x16.detach();
  x.set_requires_grad(true);
  Tensor y = batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5);
  REQUIRE(y.dtype() == dt);
  y.backward(g16);
  REQUIRE(x.grad().dtype() == dt);
  o.y = bits(y);
  o.dx = bits(x.grad());
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

TEST_CASE("batch_norm 16-bit CPU training op: the direct kernels run, within the f64 bounds, the same bits at every ISA level, thread count and layout") {
  std::mt19937 rng(36);
  const int64_t N = 3, C = 8, H = 7, W = 5, HW = H * W;  // HW = 35: two vectors of 16 lanes + a tail of 3
  const std::vector<float> xv = adversarial(N, C, HW, rng, true);
  const std::vector<float> gv = adversarial(N, C, HW, rng, false);
  for (DType dt : {DType::bf16, DType::f16})
    for (bool cl : {false, true}) {  // channels-last: the kernels' view (N*H*W, C, 1) takes the double loops
      Out first;
      bool have = false;
      for (CpuIsa isa : levels())
        for (int threads : {1, 2}) {
          IsaGuard guard(isa);
          cpu::ThreadScope ts(threads);
          INFO(dtype_name(dt) << (cl ? " channels-last" : " NCHW") << " isa " << cpu::cpu_isa_name(isa)
                              << " threads " << threads);
          op_trace_enable(true);
          op_trace_take();
          const Out direct = run_bn(dt, cl, xv, gv, N, C, H, W);
          const std::vector<OpSpan> spans = op_trace_take();
          op_trace_enable(false);
          int fwd16 = 0, bwd16 = 0;  // the direct kernels ran (not the staged path)
          for (const OpSpan& s : spans) {
            fwd16 += std::string(s.name) == "batch_norm_forward_train_16";
            bwd16 += std::string(s.name) == "batch_norm_backward_train_16";
          }
          CHECK(fwd16 == 1);
          CHECK(bwd16 == 1);
          if (!have) {
            first = direct, have = true;
            continue;
          }
          CHECK(direct.y == first.y);
          CHECK(direct.dx == first.dx);
          CHECK(direct.dw == first.dw);
          CHECK(direct.db == first.db);
          CHECK(direct.rm == first.rm);
          CHECK(direct.rv == first.rv);
        }
    // the op's y (as NCHW) against the f64 reference of the values it saw (x rounded to dt)
    std::vector<double> xd(xv.size());
    for (size_t i = 0; i < xv.size(); ++i)
      xd[i] = dt == DType::bf16 ? (double)(float)bfloat16(xv[i]) : (double)(float)half(xv[i]);
    std::vector<float> g((size_t)C), b((size_t)C);
    for (int64_t c = 0; c < C; ++c) g[(size_t)c] = 0.75f + 0.125f * (float)c, b[(size_t)c] = -0.5f + 0.25f * (float)c;
    const RefForward ref = ref_forward(N, C, HW, xd, g, b, 1e-5);
    int bad = 0;
    for (int64_t c = 0; c < C; ++c) {
      if (std::isnan(ref.var[(size_t)c])) continue;
      const FwdBounds fb = fwd_bounds(ref, c, 1e-5);
      const double kk = std::fabs((double)g[(size_t)c] * ref.invstd[(size_t)c]);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < HW; ++i) {
          const size_t j = (size_t)((n * C + c) * HW + i);
          float yk;
          std::memcpy(&yk, &first.y[j], sizeof yk);
          const double d = std::fabs(xd[j] - ref.mean[(size_t)c]);
          const double err = 1.01 * (kk * fb.mean + d * std::fabs((double)g[(size_t)c]) * fb.invstd) +
                             4 * kU * (d * kk + std::fabs((double)b[(size_t)c])) + 4 * kU * kk * fb.mean;
          const double ulp = dt == DType::bf16 ? ulp_of<bfloat16>(std::fabs(ref.y[j]) + err)
                                               : ulp_of<half>(std::fabs(ref.y[j]) + err);
          if (!(std::fabs((double)yk - ref.y[j]) <= err + ulp)) ++bad;
        }
    }
    CHECK(bad == 0);
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
