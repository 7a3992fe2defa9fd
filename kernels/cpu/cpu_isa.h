// Which x86-64 instruction set the CPU backend's hand-dispatched loops run with, chosen at run time:
// builds stay portable (no -march), and a kernel compiled three times (baseline SSE2, AVX2 = x86-64-v3,
// AVX-512 = x86-64-v4; KILN_TARGET_* below on the function that holds its OpenMP loop, so the outlined
// loop body gets the target too) takes the best the machine has. Contraction of a * b + c into FMA is off
// in the whole build (-ffp-contract=off), and the dispatched loops add in a fixed order, so every ISA gives
// the same bits (tests/unit/test_cpu_isa.cpp checks it). KILN_CPU_ISA=baseline|avx2|avx512|avx512_bf16|amx
// in the environment picks a lower one (a machine without the requested one is an error naming it).
// The two top levels are the CPU's bf16 matrix units: avx512_bf16 (AVX512-BF16 dot products) and amx
// (AMX-BF16 tiles); kiln's own loops treat both as avx512, and the bf16 convolutions (bf16_path.h,
// conv2d_bf16.h) map them to oneDNN's maximum ISA. amx counts only when the OS gives the process the tile
// state (on Linux, arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); when that request fails the level
// is the next lower one (avx512_bf16 where the CPU has it).
// Used where it measured faster: batch norm's training loops (batch_norm_train.inc: 12-13% fewer
// samples with AVX-512 on the small CNN, AVX2 level with SSE2) and the contiguous bf16 rows of the
// elementwise kernels and casts (elementwise.cpp: SSE2 lacks the narrowing and blends bf16 rounding needs;
// docs/cpu-bf16.md), the 16-bit batch norm's f32 lanes (batch_norm_channel16.h) and the bf16 widen / narrow
// runs of the 16-bit max pool and its bf16 2x2 stride-2 loop (pool.cpp, AVX-512 intrinsics with masked row
// ends). The f32 2x2 max pool rows and the Winograd
// transforms measured slower with wider vectors (their rows of 7-14 values are shorter than one vector)
// and stay SSE2 (docs/cpu-profile.md). Must not know tensors: kernels ask cpu_isa() and call their variant.
#pragma once
#include <string>

namespace kiln::cpu {

// The x86-64 microarchitecture levels, then the bf16 matrix units above AVX-512.
enum class CpuIsa : int { baseline = 1, avx2 = 3, avx512 = 4, avx512_bf16 = 5, amx = 6 };

// The best level this CPU (and build) supports; baseline off x86-64.
CpuIsa cpu_isa_supported();
// The level dispatched kernels use now: KILN_CPU_ISA's choice when set (read once), else the supported one.
CpuIsa cpu_isa();
// Sets the level (tests, benchmarks); throws kiln::Error when the CPU does not support it. Returns the old one.
CpuIsa set_cpu_isa(CpuIsa isa);
const char* cpu_isa_name(CpuIsa isa);  // "baseline", "avx2", "avx512", "avx512_bf16", "amx"
// Parses the names above; throws kiln::Error naming `what` (e.g. "KILN_CPU_ISA") otherwise.
CpuIsa parse_cpu_isa(const char* text, const char* what);
// The level kiln's own vector loops use for `isa`: avx512 for the two bf16 levels, else isa itself.
inline CpuIsa cpu_isa_vector(CpuIsa isa) { return (int)isa > (int)CpuIsa::avx512 ? CpuIsa::avx512 : isa; }

// What cpuid and xgetbv say, and whether the OS granted the AMX tile state (detection's inputs).
struct CpuFeatures {
  bool v3 = false, v4 = false;          // x86-64-v3 (AVX2, FMA, BMI) and v4 (AVX-512 F/BW/CD/DQ/VL)
  bool avx512_bf16 = false;             // cpuid leaf 7 subleaf 1, EAX bit 5
  bool amx_bf16 = false, amx_tile = false;  // cpuid leaf 7 subleaf 0, EDX bits 22 and 24
  bool os_avx512 = false;               // XCR0 bits 5-7 (opmask, ZMM state) with SSE/AVX state
  bool os_amx = false;                  // XCR0 bits 17-18 (XTILECFG, XTILEDATA)
  bool amx_permitted = false;           // arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) succeeded
};
// Reads cpuid/xgetbv and asks the kernel for the tile state (once per call; detection caches its result).
// KILN_TEST_AMX_REQUEST=fail in the environment skips the request and treats it as refused (a test hook
// for the fallback; it changes nothing on a CPU without AMX).
CpuFeatures cpu_features_probe();
// The best level `f` allows: amx needs the tile state granted, avx512_bf16 the instruction and the
// AVX-512 OS state.
CpuIsa cpu_isa_from(const CpuFeatures& f);
// The CPU's name from cpuid's brand string ("unknown" off x86-64).
std::string cpu_model_name();

}  // namespace kiln::cpu

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KILN_TARGET_AVX2 __attribute__((target("arch=x86-64-v3")))
#define KILN_TARGET_AVX512 __attribute__((target("arch=x86-64-v4")))
#define KILN_CPU_ISA_CLONES 1
#else
#define KILN_TARGET_AVX2
#define KILN_TARGET_AVX512
#define KILN_CPU_ISA_CLONES 0
#endif
