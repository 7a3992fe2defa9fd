// Run-time choice of the CPU backend's instruction set (see cpu_isa.h).
#include "kernels/cpu/cpu_isa.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "engine/core/error.h"

namespace kiln::cpu {

namespace {

CpuIsa detect() {
#if KILN_CPU_ISA_CLONES
  // The levels' features one by one: clang 14 takes neither the "x86-64-v3" names nor "f16c" / "movbe"
  // here (every CPU with AVX2, FMA and BMI2 has those two).
  __builtin_cpu_init();
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
                  __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512vl");
  if (v4) return CpuIsa::avx512;
  if (v3) return CpuIsa::avx2;
#endif
  return CpuIsa::baseline;
}

std::atomic<int>& chosen() {
  static std::atomic<int> isa{[] {
    const CpuIsa best = detect();
    const char* env = std::getenv("KILN_CPU_ISA");
    if (!env || !*env) return (int)best;
    const CpuIsa want = parse_cpu_isa(env, "KILN_CPU_ISA");
    KILN_CHECK((int)want <= (int)best, "KILN_CPU_ISA=", env, ": this CPU supports ", cpu_isa_name(best),
               " at most");
    return (int)want;
  }()};
  return isa;
}

}  // namespace

CpuIsa cpu_isa_supported() {
  static const CpuIsa best = detect();
  return best;
}

CpuIsa cpu_isa() { return (CpuIsa)chosen().load(std::memory_order_relaxed); }

CpuIsa set_cpu_isa(CpuIsa isa) {
  KILN_CHECK((int)isa <= (int)cpu_isa_supported(), "set_cpu_isa: this CPU supports ",
             cpu_isa_name(cpu_isa_supported()), " at most, not ", cpu_isa_name(isa));
  return (CpuIsa)chosen().exchange((int)isa);
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::avx512: return "avx512";
    case CpuIsa::avx2: return "avx2";
    default: return "baseline";
  }
}

CpuIsa parse_cpu_isa(const char* text, const char* what) {
  if (std::strcmp(text, "baseline") == 0) return CpuIsa::baseline;
  if (std::strcmp(text, "avx2") == 0) return CpuIsa::avx2;
  if (std::strcmp(text, "avx512") == 0) return CpuIsa::avx512;
  throw Error(str_cat(what, "=", text, ": expected baseline, avx2 or avx512"));
}

}  // namespace kiln::cpu
