// Thread count of the CPU backend: one knob for OpenMP loops and OpenBLAS's GEMM threads.
// Must not be called from inside a parallel region.
#pragma once

namespace kiln::cpu {

// Sets the OpenMP thread count used by every CPU kernel, GEMMs included: kiln::cpu::gemm splits
// each GEMM over OpenMP threads and keeps OpenBLAS itself at one thread (two thread pools on the
// same cores starve each other). n >= 1; throws kiln::Error otherwise.
void set_num_threads(int n);
// The thread count kernels will use (OpenMP's max threads).
int num_threads();

// Sets the thread count for a scope and restores the previous one at its end; n <= 0 leaves the
// count as it is. The memory predictor uses it: the CPU convolution's scratch depends on the count
// (kernels/cpu/conv2d.h), so a prediction for `--threads N` runs with N threads' sizes.
class ThreadScope {
 public:
  explicit ThreadScope(int n);
  ~ThreadScope();
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int previous_;
  bool changed_;
};

// libgomp's default wait policy (spin ~300k PAUSEs, then sleep) stalls kiln's many short parallel
// regions for tens of ms on the 2-vCPU KVM build machines (measured: ResNet18 convs 850 ms vs
// 636 ms with OMP_WAIT_POLICY=passive, 600 ms with active; bench_conv_cpu). Fully passive (no spin)
// costs a futex wake-up per region instead: the small CNN opens ~150 regions a step at batch 16,
// and its second thread bought little. A short spin before sleeping (GOMP_SPINCOUNT=`spin`, a few
// tens of microseconds) keeps the worker awake between back-to-back regions without the default's
// long spin: small CNN at 2 threads, medians of 5 alternating runs, 1005 -> 1550 img/s (batch 16),
// 1110 -> 1582 (64), 663 -> 1340 (128) (README "Measured"). libgomp reads both variables only at
// load, so a program's main() calls this first: when OMP_WAIT_POLICY is unset it sets it to
// `policy` (and GOMP_SPINCOUNT to `spin` when that is unset too) and re-executes itself
// (/proc/self/exe, same argv); otherwise it returns. Returns only if no re-exec happened (variable
// already set, or exec failed). The re-exec also sets OPENBLAS_NUM_THREADS=1 when unset: kiln
// keeps OpenBLAS single-threaded anyway (gemm.cpp), and Debian's pthread OpenBLAS otherwise starts
// a thread per core at load that spins (sched_yield) on the cores kiln's threads need.
void ensure_omp_wait_policy(char** argv, const char* policy = "passive", const char* spin = "3000");

}  // namespace kiln::cpu
