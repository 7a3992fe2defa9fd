// The CPU execution mode's scheduler (grid_runner.h): blocks one after another, a block's threads as
// fibres (a 14-instruction register switch on x86-64, ucontext elsewhere) run in turn until each waits (barrier, warp collective) or exits; then the
// scheduler releases a warp whose named lanes all wait at a collective, or the block once every
// thread that has not exited waits at the same __syncthreads. Anything else is a fault, reported
// with the kernel, block and thread, never a hang. Under AddressSanitizer the switches are announced
// (__sanitizer_start/finish_switch_fiber) and a reused fibre stack is unpoisoned first.
#include "kernels/cuda_cpu/grid_runner.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "kernels/cuda_cpu/ptx_host.h"
#include "kernels/cuda_cpu/shadow.h"

#if defined(__SANITIZE_ADDRESS__)
#define KILN_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_FIBER_ASAN 1
#endif
#endif
#if defined(KILN_FIBER_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__)
// Saves the callee-saved registers on the current stack, stores its pointer in *save_sp, switches to
// new_sp and restores from there (System V ABI; the same thread, so MXCSR and the x87 control word are
// shared). glibc's swapcontext also saves the signal mask, a system call per switch: 10x slower here.
extern "C" void kiln_fiber_switch(void** save_sp, void* new_sp);
asm(R"(
  .text
  .globl kiln_fiber_switch
  .hidden kiln_fiber_switch
  .type kiln_fiber_switch, @function
kiln_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size kiln_fiber_switch, .-kiln_fiber_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");
#endif

namespace kiln::cuda_on_cpu {

thread_local const ThreadPos* g_pos = nullptr;

namespace {

// One execution context: a saved stack pointer (x86-64) or a ucontext.
struct Ctx {
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t uc{};
#endif
};

void ctx_switch(Ctx& from, Ctx& to) {
#if defined(__x86_64__)
  kiln_fiber_switch(&from.sp, to.sp);
#else
  swapcontext(&from.uc, &to.uc);
#endif
}

// A context that starts fn (which never returns) on [stack, stack + size).
void ctx_make(Ctx& c, char* stack, size_t size, void (*fn)()) {
#if defined(__x86_64__)
  void** sp = reinterpret_cast<void**>((reinterpret_cast<uintptr_t>(stack + size)) & ~uintptr_t(15));
  *--sp = nullptr;                      // fn's return address: fn starts as if called
  *--sp = reinterpret_cast<void*>(fn);  // kiln_fiber_switch's ret goes here
  for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp, rbx, r12-r15
  c.sp = sp;
#else
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, fn, 0);
#endif
}

#if defined(KILN_FIBER_ASAN)
constexpr size_t kStackBytes = 512 * 1024;
#else
constexpr size_t kStackBytes = 128 * 1024;
#endif
constexpr size_t kGuardBytes = 4096;
constexpr int64_t kSpinLimit = int64_t(1) << 22;  // atomics/fences/sleeps of one thread between sync points
constexpr size_t kStaticSharedLimit = 48 * 1024;

enum class St { runnable, at_block, at_warp, exited };

struct Fiber {
  Ctx ctx;
  char* mapping = nullptr;  // guard page + stack
  char* stack = nullptr;
  ThreadPos pos{};
  St st = St::runnable;
  const char* file = "";  // barrier site
  int line = 0;
  unsigned mask = 0;  // warp collective
  const char* what = "";
  int64_t spins = 0;
  uint32_t collectives = 0;
  void* fake_stack = nullptr;
  Fiber() {
    mapping = (char*)mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping == MAP_FAILED) throw Error("CPU mode: cannot map a fibre stack");
    mprotect(mapping, kGuardBytes, PROT_NONE);  // an overflowing fibre faults instead of corrupting
    stack = mapping + kGuardBytes;
  }
  ~Fiber() { munmap(mapping, kStackBytes + kGuardBytes); }
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;
};

struct Warp {
  unsigned char slot[2][32][16];
};

struct Runner {
  Ctx sched;
  void* sched_fake = nullptr;
  const void* sched_bottom = nullptr;
  size_t sched_size = 0;
  std::vector<std::unique_ptr<Fiber>> fibers;  // a pool, grown to the largest block
  int n = 0;
  Fiber* cur = nullptr;
  std::vector<Warp> warps;
  const std::function<void()>* body = nullptr;
  std::string fault;
  std::vector<std::pair<const void*, void*>> statics;  // this block's KILN_SHARED buffers
  size_t static_bytes = 0;
  void* dyn = nullptr;
  size_t dyn_size = 0;
  bool active = false;
};

thread_local Runner t_runner;
RunStats g_stats;
std::map<std::string, int64_t> g_most_blocks;  // kernel name -> most blocks in one launch

std::map<std::string, int>& bounds_table() {
  static std::map<std::string, int> t;
  return t;
}
std::map<const void*, int>& dyn_optin() {
  static std::map<const void*, int> t;
  return t;
}

std::string pos_str(const ThreadPos& p) {
  return str_cat("block (", p.bid.x, ", ", p.bid.y, ", ", p.bid.z, ") thread (", p.tid.x, ", ", p.tid.y, ", ",
                 p.tid.z, ")");
}
std::string hex(unsigned v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}

void to_fiber(Runner& R, Fiber* f) {
  R.cur = f;
  g_pos = &f->pos;
  ++g_stats.switches;
#if defined(KILN_FIBER_ASAN)
  __sanitizer_start_switch_fiber(&R.sched_fake, f->stack, kStackBytes);
#endif
  ctx_switch(R.sched, f->ctx);
#if defined(KILN_FIBER_ASAN)
  __sanitizer_finish_switch_fiber(R.sched_fake, nullptr, nullptr);
#endif
  g_pos = nullptr;
  R.cur = nullptr;
}

// From the running fibre back to the scheduler; returns when the scheduler resumes it (never when
// `dying`).
void to_scheduler(Runner& R, bool dying) {
  Fiber* f = R.cur;
#if defined(KILN_FIBER_ASAN)
  __sanitizer_start_switch_fiber(dying ? nullptr : &f->fake_stack, R.sched_bottom, R.sched_size);
#else
  (void)dying;
#endif
  ctx_switch(f->ctx, R.sched);
#if defined(KILN_FIBER_ASAN)
  __sanitizer_finish_switch_fiber(f->fake_stack, &R.sched_bottom, &R.sched_size);
#endif
}

void fiber_main() {
  Runner& R = t_runner;
#if defined(KILN_FIBER_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &R.sched_bottom, &R.sched_size);
#endif
  Fiber* f = R.cur;
  try {
    (*R.body)();
  } catch (const std::exception& e) {
    if (R.fault.empty()) R.fault = str_cat(pos_str(f->pos), ": ", e.what());
  }
  f->st = St::exited;
  to_scheduler(R, true);
  std::abort();  // an exited fibre is never resumed
}

void set_fault(Runner& R, std::string msg) {
  if (R.fault.empty()) R.fault = std::move(msg);
}

// Releases what can be released; false when nothing can (a fault is set then, or all exited).
bool release(Runner& R) {
  const int n = R.n;
  int exited = 0, at_warp = 0;
  for (int i = 0; i < n; ++i) {
    exited += R.fibers[i]->st == St::exited;
    at_warp += R.fibers[i]->st == St::at_warp;
  }
  if (exited == n) return false;
  bool released = false;
  for (int i = 0; i < n; ++i) {
    Fiber& f = *R.fibers[i];
    if (f.st != St::at_warp) continue;
    const int w = i >> 5;
    bool complete = true;
    for (int b = 0; b < 32; ++b) {
      if (!(f.mask >> b & 1u)) continue;
      const int j = w * 32 + b;
      if (j >= n) {
        set_fault(R, str_cat(pos_str(f.pos), ": ", f.what, " with mask ", hex(f.mask), " names lane ", b,
                             ", which does not exist (the block has ", n, " threads)"));
        return false;
      }
      const Fiber& g = *R.fibers[j];
      if (g.st == St::exited) {
        set_fault(R, str_cat(pos_str(f.pos), ": ", f.what, " with mask ", hex(f.mask), " waits for lane ", b,
                             ", which has exited (a warp collective with a lane missing)"));
        return false;
      }
      if (g.st != St::at_warp || g.mask != f.mask) complete = false;
    }
    if (!complete) continue;
    for (int b = 0; b < 32; ++b)
      if (f.mask >> b & 1u) R.fibers[w * 32 + b]->st = St::runnable;
    if (std::strcmp(f.what, "__syncwarp") == 0) shadow::warp_barrier(w);
    released = true;
  }
  if (released) return true;
  const Fiber* block_waiter = nullptr;
  for (int i = 0; i < n; ++i)
    if (R.fibers[i]->st == St::at_block) {
      block_waiter = R.fibers[i].get();
      break;
    }
  if (at_warp) {
    for (int i = 0; i < n; ++i) {
      const Fiber& f = *R.fibers[i];
      if (f.st != St::at_warp) continue;
      set_fault(R, str_cat(pos_str(f.pos), ": ", f.what, " with mask ", hex(f.mask),
                           " never completes: a named lane waits elsewhere",
                           block_waiter ? str_cat(" (at __syncthreads ", block_waiter->file, ":", block_waiter->line, ")")
                                        : std::string(" (another collective or mask)")));
      return false;
    }
  }
  for (int i = 0; i < n; ++i) {
    const Fiber& f = *R.fibers[i];
    if (f.st != St::at_block) continue;
    if (f.line != block_waiter->line || std::strcmp(f.file, block_waiter->file) != 0) {
      set_fault(R, str_cat("barrier divergence: ", pos_str(block_waiter->pos), " waits at __syncthreads ",
                           block_waiter->file, ":", block_waiter->line, ", ", pos_str(f.pos), " at ", f.file, ":",
                           f.line));
      return false;
    }
  }
  for (int i = 0; i < n; ++i)
    if (R.fibers[i]->st == St::at_block) R.fibers[i]->st = St::runnable;
  shadow::barrier();
  return true;
}

void run_block(Runner& R) {
  for (int i = 0; i < R.n; ++i) {
    Fiber& f = *R.fibers[i];
    f.st = St::runnable;
    f.spins = 0;
    f.collectives = 0;
    f.fake_stack = nullptr;
#if defined(KILN_FIBER_ASAN)
    __asan_unpoison_memory_region(f.stack, kStackBytes);  // frames abandoned by an earlier fault
#endif
    ctx_make(f.ctx, f.stack, kStackBytes, fiber_main);
  }
  for (;;) {
    bool ran = false;
    for (int i = 0; i < R.n; ++i) {
      Fiber* f = R.fibers[i].get();
      if (f->st != St::runnable) continue;
      to_fiber(R, f);
      ran = true;
      if (!R.fault.empty()) return;
    }
    if (ran) continue;
    if (!release(R)) return;
  }
}

void free_block_shared(Runner& R) {
  for (auto& s : R.statics) std::free(s.second);
  R.statics.clear();
  R.static_bytes = 0;
  std::free(R.dyn);
  R.dyn = nullptr;
}

}  // namespace

void run_grid(const char* name, const void* kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t,
              const std::function<void()>& body) {
  Runner& R = t_runner;
  if (R.active) throw Error(str_cat("launch of ", name, " from inside a kernel (CPU mode has no dynamic parallelism)"));
  const int n = (int)(block.x * block.y * block.z);
  const auto b = bounds_table().find(name);
  if (b == bounds_table().end())
    throw Error(str_cat("launch of ", name, ": the kernel states no KILN_KERNEL_BOUNDS (every kiln kernel must)"));
  if (n > b->second)
    throw Error(str_cat("launch of ", name, ": ", n, " threads per block, its __launch_bounds__ allows ", b->second));
  if (smem > 48 * 1024) {
    const auto o = dyn_optin().find(kernel);
    const int opted = o == dyn_optin().end() ? 48 * 1024 : o->second;
    if (smem > (size_t)opted)
      throw Error(str_cat("launch of ", name, ": ", smem, " bytes of dynamic shared memory, the kernel opted in to ",
                          opted, " (cudaFuncSetAttribute MaxDynamicSharedMemorySize)"));
  }
  // KILN_CUDA_CPU_LAUNCH_LOG=<file>: each launch's kernel name appended (docs/gpu-status.md is built from it).
  if (const char* log = std::getenv("KILN_CUDA_CPU_LAUNCH_LOG"); log && *log)
    if (FILE* fp = std::fopen(log, "a")) {
      std::fprintf(fp, "%s\n", name);
      std::fclose(fp);
    }
  while ((int)R.fibers.size() < n) R.fibers.push_back(std::make_unique<Fiber>());
  R.n = n;
  R.warps.assign((size_t)(n + 31) / 32, Warp{});
  R.body = &body;
  R.fault.clear();
  R.active = true;
  ++g_stats.launches;
  {
    int64_t& most = g_most_blocks[name];
    const int64_t blocks = (int64_t)grid.x * grid.y * grid.z;
    if (blocks > most) most = blocks;
  }
  for (unsigned bz = 0; bz < grid.z && R.fault.empty(); ++bz)
    for (unsigned by = 0; by < grid.y && R.fault.empty(); ++by)
      for (unsigned bx = 0; bx < grid.x && R.fault.empty(); ++bx) {
        for (int i = 0; i < n; ++i) {
          ThreadPos& p = R.fibers[i]->pos;
          p.tid = uint3{(unsigned)i % block.x, ((unsigned)i / block.x) % block.y, (unsigned)i / (block.x * block.y)};
          p.bid = uint3{bx, by, bz};
          p.block = block;
          p.grid = grid;
          p.linear = i;
        }
        shadow::block_begin((n + 31) / 32);
        ptx_block_begin(n);
        R.dyn_size = smem;
        R.dyn = std::malloc(smem ? smem : 1);
        std::memset(R.dyn, 0xff, smem);
        shadow::add_buffer(R.dyn, smem, "dynamic shared memory");
        ++g_stats.blocks;
        g_stats.threads += n;
        run_block(R);
        shadow::block_end();
        free_block_shared(R);
      }
  R.active = false;
  R.body = nullptr;
  if (!R.fault.empty()) {
    std::string f = std::move(R.fault);
    R.fault.clear();
    throw Error(str_cat("kernel ", name, " (CPU mode): ", f));
  }
}

void sync_block(const char* file, int line) {
  Runner& R = t_runner;
  if (!R.cur) throw Error("__syncthreads outside a kernel");
  Fiber* f = R.cur;
  f->st = St::at_block;
  f->file = file;
  f->line = line;
  f->spins = 0;
  to_scheduler(R, false);
}

void sync_warp(unsigned mask, const char* what) {
  Runner& R = t_runner;
  Fiber* f = R.cur;
  if (!f) throw Error(str_cat(what, " outside a kernel"));
  const int lane = f->pos.linear & 31;
  if (!(mask >> lane & 1u)) fault(str_cat(what, ": the calling lane ", lane, " is not in its mask ", hex(mask)));
  f->st = St::at_warp;
  f->mask = mask;
  f->what = what;
  f->spins = 0;
  to_scheduler(R, false);
}

const unsigned char* warp_gather(unsigned mask, const void* mine, size_t bytes, const char* what) {
  Runner& R = t_runner;
  Fiber* f = R.cur;
  if (!f) throw Error(str_cat(what, " outside a kernel"));
  const int lane = f->pos.linear & 31, w = f->pos.linear >> 5;
  const int parity = (int)(f->collectives++ & 1u);
  std::memcpy(R.warps[w].slot[parity][lane], mine, bytes);
  sync_warp(mask, what);
  return &R.warps[w].slot[parity][0][0];
}

const void* warp_exchange(unsigned mask, const void* mine, size_t bytes, int src, const char* what) {
  const unsigned char* all = warp_gather(mask, mine, bytes, what);  // this lane's slot written, the warp met
  if (src < 0 || src > 31 || !(mask >> src & 1u))
    fault(str_cat(what, ": lane ", t_runner.cur->pos.linear & 31, " reads lane ", src, ", which is not in the mask ",
                  hex(mask)));
  return all + (size_t)src * sizeof(t_runner.warps[0].slot[0][0]);
}

void count_spin(const char* what) {
  Fiber* f = t_runner.cur;
  if (!f) return;
  if (++f->spins > kSpinLimit)
    fault(str_cat(what, " called ", kSpinLimit, " times with no barrier between: a spin-wait on another block? ",
                  "(blocks run one after another here; a grid-wide step needs two launches or the last-block pattern)"));
}

void fault(std::string&& msg) {
  Runner& R = t_runner;
  Fiber* f = R.cur;
  if (!f) throw Error(msg);
  {
    // Nothing on this fibre's stack is destroyed after the switch: leave no heap buffer there.
    const std::string m = std::move(msg);
    set_fault(R, str_cat(pos_str(f->pos), ": ", m));
  }
  f->st = St::exited;
  to_scheduler(R, true);
  std::abort();
}

void* static_shared_bytes(const void* site, size_t bytes, const char* name) {
  Runner& R = t_runner;
  for (auto& s : R.statics)
    if (s.first == site) return s.second;
  R.static_bytes += bytes;
  if (R.static_bytes > kStaticSharedLimit)
    fault(str_cat("static shared memory above 48 KiB (", R.static_bytes, " bytes at ", name, ")"));
  void* p = std::malloc(bytes ? bytes : 1);
  std::memset(p, 0xff, bytes);
  R.statics.emplace_back(site, p);
  shadow::add_buffer(p, bytes, name);
  return p;
}

void* dynamic_shared_bytes() { return t_runner.dyn; }
size_t dynamic_shared_size() { return t_runner.dyn_size; }

bool register_kernel_bounds(const char* name, int max_threads) {
  bounds_table()[name] = max_threads;
  return true;
}

cudaError_t set_max_dynamic_shared(const void* kernel, int bytes) {
  if (bytes < 0 || bytes > 227 * 1024) return cudaErrorInvalidValue;
  dyn_optin()[kernel] = bytes;
  return cudaSuccess;
}

RunStats run_stats() { return g_stats; }

int64_t most_blocks_launched(const std::string& name) {
  const auto it = g_most_blocks.find(name);
  return it == g_most_blocks.end() ? 0 : it->second;
}
void clear_launch_geometry() { g_most_blocks.clear(); }

bool shadow_checks_on() { return shadow::instrumented(); }

}  // namespace kiln::cuda_on_cpu
