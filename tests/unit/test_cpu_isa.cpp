// The CPU kernels dispatched by instruction set (kernels/cpu/cpu_isa.h): every level this machine has
// (baseline SSE2, AVX2, AVX-512) gives the baseline's bits, on data chosen to expose a reordered or
// contracted sum (a large channel mean against a small spread, lengths that are not a multiple of any
// vector width); the KILN_CPU_ISA names are parsed strictly.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "kernels/cpu/batch_norm.h"
#include "kernels/cpu/cpu_isa.h"
#include "support/cpu_paths.h"

using namespace kiln;
using kiln::test::IsaGuard;
using cpu::CpuIsa;

namespace {

// The levels to compare: those this CPU supports.
std::vector<CpuIsa> levels() {
  std::vector<CpuIsa> v = {CpuIsa::baseline};
  if ((int)cpu::cpu_isa_supported() >= (int)CpuIsa::avx2) v.push_back(CpuIsa::avx2);
  if ((int)cpu::cpu_isa_supported() >= (int)CpuIsa::avx512) v.push_back(CpuIsa::avx512);
  // The bf16 levels run kiln's own loops as avx512 (cpu_isa_vector): the same bits again.
  if ((int)cpu::cpu_isa_supported() >= (int)CpuIsa::avx512_bf16) v.push_back(CpuIsa::avx512_bf16);
  if ((int)cpu::cpu_isa_supported() >= (int)CpuIsa::amx) v.push_back(CpuIsa::amx);
  return v;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Batch norm forward + backward at one level: every output, concatenated.
template <typename T>
std::vector<T> batch_norm_outputs(CpuIsa isa, int64_t N, int64_t C, int64_t HW, const std::vector<T>& x,
                                  const std::vector<T>& dy, const std::vector<T>& gamma, const std::vector<T>& beta) {
  IsaGuard guard(isa);
  std::vector<T> y(x.size()), mean(C), invstd(C), rm(C, T(0.5)), rv(C, T(2)), dx(x.size()), dg(C), db(C);
  cpu::batch_norm_forward_train<T>(N, C, HW, x.data(), gamma.data(), beta.data(), 1e-5, y.data(), mean.data(),
                                   invstd.data(), rm.data(), rv.data(), 0.1);
  cpu::batch_norm_backward_train<T>(N, C, HW, dy.data(), x.data(), gamma.data(), mean.data(), invstd.data(), dx.data(),
                                    dg.data(), db.data());
  std::vector<T> all;
  for (const std::vector<T>* v : {&y, &mean, &invstd, &rm, &rv, &dx, &dg, &db}) all.insert(all.end(), v->begin(), v->end());
  return all;
}

template <typename T>
void check_batch_norm_levels() {
  std::mt19937 g(5);
  std::normal_distribution<double> nd(0.0, 1.0);
  const int64_t shapes[][3] = {{3, 5, 49}, {2, 3, 1}, {5, 4, 67}, {1, 2, 1031}};  // N, C, HW
  for (const auto& shape : shapes) {
    const int64_t N = shape[0], C = shape[1], HW = shape[2];
    std::vector<T> x((size_t)(N * C * HW)), dy(x.size()), gamma((size_t)C), beta((size_t)C);
    for (size_t i = 0; i < x.size(); ++i) {
      const int64_t c = (int64_t)(i / (size_t)HW) % C;
      x[i] = (T)(1000.0 * (double)(c + 1) + 0.21 * nd(g));  // a mean large against the spread
      dy[i] = (T)nd(g);
    }
    for (int64_t c = 0; c < C; ++c) gamma[(size_t)c] = (T)(0.5 + 0.1 * (double)c), beta[(size_t)c] = (T)(0.1 * (double)c - 0.2);
    const std::vector<T> base = batch_norm_outputs<T>(CpuIsa::baseline, N, C, HW, x, dy, gamma, beta);
    for (CpuIsa isa : levels())
      CHECK_MESSAGE(same_bits(base, batch_norm_outputs<T>(isa, N, C, HW, x, dy, gamma, beta)), std::string(cpu::cpu_isa_name(isa)),
                    " N=", N, " C=", C, " HW=", HW);
  }
}

}  // namespace

TEST_CASE("cpu isa: batch norm training forward and backward give the baseline's bits at every level this CPU has") {
  MESSAGE("this CPU: up to " << std::string(cpu::cpu_isa_name(cpu::cpu_isa_supported())) << ", in use: "
                             << std::string(cpu::cpu_isa_name(cpu::cpu_isa())));
  check_batch_norm_levels<float>();
  check_batch_norm_levels<double>();
}

TEST_CASE("cpu isa: names parse strictly, a level above the CPU's is refused") {
  CHECK(cpu::parse_cpu_isa("avx2", "KILN_CPU_ISA") == CpuIsa::avx2);
  CHECK(cpu::parse_cpu_isa("baseline", "KILN_CPU_ISA") == CpuIsa::baseline);
  CHECK(std::string(cpu::cpu_isa_name(CpuIsa::avx512)) == "avx512");
  CHECK_THROWS_WITH(cpu::parse_cpu_isa("avx1024", "KILN_CPU_ISA"), "KILN_CPU_ISA=avx1024: expected baseline, avx2, avx512, avx512_bf16 or amx");
  CHECK(cpu::parse_cpu_isa("avx512_bf16", "KILN_CPU_ISA") == CpuIsa::avx512_bf16);
  CHECK(cpu::parse_cpu_isa("amx", "KILN_CPU_ISA") == CpuIsa::amx);
  CHECK(std::string(cpu::cpu_isa_name(CpuIsa::amx)) == "amx");
  CHECK(cpu::cpu_isa_vector(CpuIsa::amx) == CpuIsa::avx512);
  CHECK(cpu::cpu_isa_vector(CpuIsa::avx512_bf16) == CpuIsa::avx512);
  CHECK(cpu::cpu_isa_vector(CpuIsa::avx2) == CpuIsa::avx2);
  if (cpu::cpu_isa_supported() != CpuIsa::amx) CHECK_THROWS_AS(cpu::set_cpu_isa(CpuIsa::amx), Error);
  if ((int)cpu::cpu_isa_supported() < (int)CpuIsa::avx512)
    CHECK_THROWS_AS(cpu::set_cpu_isa(CpuIsa::avx512), Error);
  const CpuIsa before = cpu::cpu_isa();
  {
    IsaGuard guard(CpuIsa::baseline);
    CHECK(cpu::cpu_isa() == CpuIsa::baseline);
  }
  CHECK(cpu::cpu_isa() == before);
}
