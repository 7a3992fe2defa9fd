// Run-time choice of the CPU backend's instruction set (see cpu_isa.h).
#include "kernels/cpu/cpu_isa.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "engine/core/error.h"

#if KILN_CPU_ISA_CLONES
#include <cpuid.h>
#endif
#if KILN_CPU_ISA_CLONES && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace kiln::cpu {

namespace {

#if KILN_CPU_ISA_CLONES
unsigned long long read_xcr0() {
  unsigned eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return ((unsigned long long)edx << 32) | eax;
}
#endif

// Asks Linux for the AMX tile data state (off by default for every process since 5.16).
bool request_amx_permission() {
  const char* hook = std::getenv("KILN_TEST_AMX_REQUEST");
  if (hook && std::strcmp(hook, "fail") == 0) return false;
#if KILN_CPU_ISA_CLONES && defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

CpuIsa detect() { return cpu_isa_from(cpu_features_probe()); }

std::atomic<int>& chosen() {
  static std::atomic<int> isa{[] {
    const CpuIsa best = cpu_isa_supported();
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

CpuFeatures cpu_features_probe() {
  CpuFeatures f;
#if KILN_CPU_ISA_CLONES
  // The levels' features one by one: clang 14 takes neither the "x86-64-v3" names nor "f16c" / "movbe"
  // here (every CPU with AVX2, FMA and BMI2 has those two).
  __builtin_cpu_init();
  f.v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
         __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt");
  f.v4 = f.v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl");
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    const unsigned max_sub = a;
    f.amx_bf16 = (d >> 22) & 1u;
    f.amx_tile = (d >> 24) & 1u;
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    if (max_sub >= 1 && __get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) f.avx512_bf16 = (a1 >> 5) & 1u;
  }
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  const bool osxsave = __get_cpuid(1, &a1, &b1, &c1, &d1) && ((c1 >> 27) & 1u);
  if (osxsave) {
    const unsigned long long xcr0 = read_xcr0();
    f.os_avx512 = (xcr0 & 0xE6ull) == 0xE6ull;        // SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM
    f.os_amx = (xcr0 & 0x60000ull) == 0x60000ull;     // XTILECFG, XTILEDATA
  }
  if (f.amx_tile && f.amx_bf16 && f.os_amx) f.amx_permitted = request_amx_permission();
#endif
  return f;
}

CpuIsa cpu_isa_from(const CpuFeatures& f) {
  if (!f.v4) return f.v3 ? CpuIsa::avx2 : CpuIsa::baseline;
  const bool bf16 = f.avx512_bf16 && f.os_avx512;
  if (bf16 && f.amx_bf16 && f.amx_tile && f.os_amx && f.amx_permitted) return CpuIsa::amx;
  // AMX without AVX512-BF16 does not exist in practice; oneDNN's amx path needs the tiles only, but kiln
  // keeps the levels ordered, so such a CPU reports avx512.
  if (bf16) return CpuIsa::avx512_bf16;
  return CpuIsa::avx512;
}

std::string cpu_model_name() {
#if KILN_CPU_ISA_CLONES
  unsigned regs[12] = {};
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000004u) return "unknown";
  for (unsigned i = 0; i < 3; ++i) __get_cpuid(0x80000002u + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2],
                                               &regs[4 * i + 3]);
  char text[49] = {};
  std::memcpy(text, regs, 48);
  std::string s(text);
  const size_t first = s.find_first_not_of(' '), last = s.find_last_not_of(' ');
  return first == std::string::npos ? "unknown" : s.substr(first, last - first + 1);
#else
  return "unknown";
#endif
}

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
    case CpuIsa::amx: return "amx";
    case CpuIsa::avx512_bf16: return "avx512_bf16";
    case CpuIsa::avx512: return "avx512";
    case CpuIsa::avx2: return "avx2";
    default: return "baseline";
  }
}

CpuIsa parse_cpu_isa(const char* text, const char* what) {
  if (std::strcmp(text, "baseline") == 0) return CpuIsa::baseline;
  if (std::strcmp(text, "avx2") == 0) return CpuIsa::avx2;
  if (std::strcmp(text, "avx512") == 0) return CpuIsa::avx512;
  if (std::strcmp(text, "avx512_bf16") == 0) return CpuIsa::avx512_bf16;
  if (std::strcmp(text, "amx") == 0) return CpuIsa::amx;
  throw Error(str_cat(what, "=", text, ": expected baseline, avx2, avx512, avx512_bf16 or amx"));
}

}  // namespace kiln::cpu
