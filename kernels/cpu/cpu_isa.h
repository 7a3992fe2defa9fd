// Which x86-64 instruction set the CPU backend's hand-dispatched loops run with, chosen at run time:
// builds stay portable (no -march), and a kernel compiled three times (baseline SSE2, AVX2 = x86-64-v3,
// AVX-512 = x86-64-v4; KILN_TARGET_* below on the function that holds its OpenMP loop, so the outlined
// loop body gets the target too) takes the best the machine has. Contraction of a * b + c into FMA is off
// in the whole build (-ffp-contract=off), and the dispatched loops add in a fixed order, so every ISA gives
// the same bits (tests/unit/test_cpu_isa.cpp checks it). KILN_CPU_ISA=baseline|avx2|avx512 in the
// environment picks a lower one (a machine without the requested one is an error naming it).
// Used where it measured faster: batch norm's training loops (batch_norm_train.inc: 12-13% fewer
// samples with AVX-512 on the small CNN, AVX2 level with SSE2). The 2x2 max pool rows and the Winograd
// transforms measured slower with wider vectors (their rows of 7-14 values are shorter than one vector)
// and stay SSE2 (docs/cpu-profile.md). Must not know tensors: kernels ask cpu_isa() and call their variant.
#pragma once

namespace kiln::cpu {

enum class CpuIsa : int { baseline = 1, avx2 = 3, avx512 = 4 };  // the x86-64 microarchitecture levels

// The best level this CPU (and build) supports; baseline off x86-64.
CpuIsa cpu_isa_supported();
// The level dispatched kernels use now: KILN_CPU_ISA's choice when set (read once), else the supported one.
CpuIsa cpu_isa();
// Sets the level (tests, benchmarks); throws kiln::Error when the CPU does not support it. Returns the old one.
CpuIsa set_cpu_isa(CpuIsa isa);
const char* cpu_isa_name(CpuIsa isa);  // "baseline", "avx2", "avx512"
// Parses "baseline" | "avx2" | "avx512"; throws kiln::Error naming `what` (e.g. "KILN_CPU_ISA") otherwise.
CpuIsa parse_cpu_isa(const char* text, const char* what);

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
