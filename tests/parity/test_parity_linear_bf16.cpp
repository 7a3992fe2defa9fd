// bf16 linear (kernels/cpu/matmul_bf16.h on the oneDNN paths, f32 staging otherwise) against PyTorch 1.13's
// bf16 F.linear forward and backward (tests/support/oracle/linear_bf16.py), the small CNN's fc1 at batch 16
// (16 x 3136 -> 128, above the oneDNN size rule) and a product with K, N not multiples of 16 (5 x 77 -> 203).
// Inputs are exact bf16 values. Each side is within B = 2^-8 |ref| + (1 + 2^-8) 2L 2^-24 sum|terms| of the
// f64 value (one bf16 rounding of an f32 accumulation of L exact products; test_matmul_bf16.cpp derives it),
// so |kiln - torch| <= 2B per element. Prints kiln's path and the largest difference as a share of 2B.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "engine/io/npy.h"
#include "engine/ops/ops.h"
#include "kernels/cpu/bf16_path.h"
#include "support/tensor_host.h"

using namespace kiln;
using kiln::test::from_host;
using kiln::test::to_host;

namespace {

std::vector<double> bf16_values(size_t n, std::mt19937& g) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<double> v(n);
  for (auto& x : v) x = (double)(float)bfloat16(u(g));
  return v;
}

// Checks kiln's and torch's bf16 results against each other within 2B (B from the f64 sum of |terms| and
// value, computed here: out[i] = sum_l a(i, l) b(l, i)), returns the largest |kiln - torch| / 2B.
double compare(const std::vector<double>& kiln_v, const std::vector<double>& torch_v, const std::vector<double>& ref,
               const std::vector<double>& abs, int64_t L, const char* what) {
  const double u = std::ldexp(1.0, -8);
  double worst = 0;
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double b2 = 2 * (u * std::fabs(ref[i]) + (1 + u) * 2.0 * (double)L * std::ldexp(1.0, -24) * abs[i]) + 1e-30;
    const double d = std::fabs(kiln_v[i] - torch_v[i]);
    worst = std::max(worst, d / b2);
    if (!(d <= b2) && bad++ < 3) MESSAGE(what << "[" << i << "]: kiln " << kiln_v[i] << ", torch " << torch_v[i] << " (2B " << b2 << ")");
  }
  CHECK(bad == 0);
  return worst;
}

void parity_case(int64_t M, int64_t K, int64_t N, uint32_t seed) {
  namespace fs = std::filesystem;
  INFO("linear M " << M << " K " << K << " N " << N);
  const std::string dir = (fs::temp_directory_path() / ("kiln_parity_linear_bf16_" + std::to_string(::getpid()) +
                                                        "_" + std::to_string(M) + "x" + std::to_string(K)))
                              .string();
  fs::create_directories(dir);
  std::mt19937 g(seed);
  const std::vector<double> x = bf16_values(M * K, g), w = bf16_values(N * K, g), dy = bf16_values(M * N, g);
  Tensor xf = to_dtype(tensor_from<double>(x, {M, K}), DType::f32), wf = to_dtype(tensor_from<double>(w, {N, K}), DType::f32);
  Tensor dyf = to_dtype(tensor_from<double>(dy, {M, N}), DType::f32);
  write_npy(dir + "/x.npy", to_host(xf));
  write_npy(dir + "/w.npy", to_host(wf));
  write_npy(dir + "/dy.npy", to_host(dyf));
  const std::string cmd = std::string("/usr/bin/python3 ") + KILN_SOURCE_DIR + "/tests/support/oracle/linear_bf16.py '" +
                          dir + "' > '" + dir + "/oracle.log' 2>&1";
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "the oracle failed, see " << dir << "/oracle.log");
  Tensor xt = to_dtype(xf, DType::bf16).set_requires_grad(true), wt = to_dtype(wf, DType::bf16).set_requires_grad(true);
  Tensor yt = linear(xt, wt);
  yt.backward(to_dtype(dyf, DType::bf16));
  // f64 values and sums of |terms|: y = x w^T (L = K), dx = dy w (L = N), dw = dy^T x (L = M).
  std::vector<double> y(M * N, 0), ya(M * N, 0), dx(M * K, 0), dxa(M * K, 0), dw(N * K, 0), dwa(N * K, 0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) {
        const double t = x[i * K + k] * w[j * K + k], s = dy[i * N + j] * w[j * K + k], r = dy[i * N + j] * x[i * K + k];
        y[i * N + j] += t, ya[i * N + j] += std::fabs(t);
        dx[i * K + k] += s, dxa[i * K + k] += std::fabs(s);
        dw[j * K + k] += r, dwa[j * K + k] += std::fabs(r);
      }
  auto torch_values = [&](const char* name) { return from_host(read_npy(dir + "/" + name + ".npy")).to_vector<double>(); };
  const double wy = compare(yt.to_vector<double>(), torch_values("y"), y, ya, K, "y");
  const double wdx = compare(xt.grad().to_vector<double>(), torch_values("dx"), dx, dxa, N, "dx");
  const double wdw = compare(wt.grad().to_vector<double>(), torch_values("dw"), dw, dwa, M, "dw");
  MESSAGE("linear " << M << "x" << K << " -> " << N << " (kiln bf16 path " << std::string(cpu::bf16_path_name(cpu::bf16_path()))
                    << "): largest |kiln - torch| / 2B: y " << wy << ", dx " << wdx << ", dw " << wdw);
  fs::remove_all(dir);
}

}  // namespace

TEST_CASE("parity linear bf16: forward and both gradients against torch 1.13's bf16 F.linear") {
  parity_case(16, 3136, 128, 41);
  parity_case(5, 77, 203, 42);
}
