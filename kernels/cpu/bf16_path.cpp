// The bf16 convolution path and oneDNN's once-per-process ISA (see bf16_path.h).
#include "kernels/cpu/bf16_path.h"

#include <atomic>
#include <mutex>

#include "engine/core/error.h"
#include "kernels/cpu/cpu_isa.h"

#if defined(KILN_WITH_ONEDNN)
#include <dnnl.h>
#endif

namespace kiln::cpu {

namespace {

std::mutex fix_mutex;
std::atomic<int> fixed{(int)Bf16Path::portable};  // portable: not fixed yet

}  // namespace

bool onednn_built() {
#if defined(KILN_WITH_ONEDNN)
  return true;
#else
  return false;
#endif
}

std::string onednn_version() {
#if defined(KILN_WITH_ONEDNN)
  const dnnl_version_t* v = dnnl_version();
  return str_cat(v->major, ".", v->minor, ".", v->patch);
#else
  return "none (built without oneDNN)";
#endif
}

Bf16Path bf16_path_wanted() {
  if (!onednn_built()) return Bf16Path::portable;
  switch (cpu_isa()) {
    case CpuIsa::amx: return Bf16Path::onednn_amx;
    case CpuIsa::avx512_bf16: return Bf16Path::onednn_avx512_bf16;
    default: return Bf16Path::portable;
  }
}

Bf16Path onednn_fixed_path() { return (Bf16Path)fixed.load(std::memory_order_acquire); }

Bf16Path bf16_path() {
  const Bf16Path want = bf16_path_wanted(), have = onednn_fixed_path();
  KILN_CHECK(want == Bf16Path::portable || have == Bf16Path::portable || want == have, "bf16 convolution: ",
             "KILN_CPU_ISA / set_cpu_isa asks for ", bf16_path_name(want), " but oneDNN's ISA was fixed to ",
             bf16_path_name(have), " by this process's first bf16 convolution (oneDNN takes one setting per "
             "process: set KILN_CPU_ISA before the first one)");
  return want;
}

const char* bf16_path_name(Bf16Path p) {
  switch (p) {
    case Bf16Path::onednn_amx: return "onednn amx";
    case Bf16Path::onednn_avx512_bf16: return "onednn avx512_bf16";
    default: return "portable (f32 staging, slow)";
  }
}

void onednn_fix_path(Bf16Path p) {
  KILN_CHECK(p != Bf16Path::portable, "onednn_fix_path: the portable path has no oneDNN ISA");
  std::lock_guard<std::mutex> lock(fix_mutex);
  const Bf16Path have = onednn_fixed_path();
  if (have == p) return;
  KILN_CHECK(have == Bf16Path::portable, "bf16 convolution: oneDNN's ISA is fixed to ", bf16_path_name(have),
             " in this process; ", bf16_path_name(p), " needs a new process (KILN_CPU_ISA)");
#if defined(KILN_WITH_ONEDNN)
  const dnnl_cpu_isa_t isa = p == Bf16Path::onednn_amx ? dnnl_cpu_isa_avx512_core_amx : dnnl_cpu_isa_avx512_core_bf16;
  const dnnl_status_t st = dnnl_set_max_cpu_isa(isa);
  KILN_CHECK(st == dnnl_success, "bf16 convolution: dnnl_set_max_cpu_isa(", bf16_path_name(p),
             ") failed with status ", (int)st, " (oneDNN already ran a primitive in this process)");
#else
  throw Error(str_cat("bf16 convolution: ", bf16_path_name(p), " needs oneDNN; this build has none"));
#endif
  fixed.store((int)p, std::memory_order_release);
}

}  // namespace kiln::cpu
