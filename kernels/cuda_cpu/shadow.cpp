// Shared-memory race and uninitialised-read detection of the CPU execution mode (shadow.h). The
// kernel translation units of kiln_cuda_cpu are compiled with GCC's -fsanitize=thread, which calls a
// __tsan_readN / __tsan_writeN hook before every memory access; this file defines those hooks (no
// TSan runtime is linked) and checks only addresses inside the running block's shared buffers: a
// range test per access, nothing else. The atomic hooks perform the operation uninstrumented.
// Must not be compiled with -fsanitize=thread itself.
#include "kernels/cuda_cpu/shadow.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "kernels/cuda_cpu/grid_runner.h"

namespace kiln::cuda_on_cpu::shadow {
namespace {

struct Cell {
  int32_t writer = -1, reader = -1;  // thread (linear id); reader -2: several threads
  uint32_t wb = 0, ww = 0, rb = 0, rw = 0;  // block and warp epoch of the access
  bool init = false;
};
struct Buf {
  char* lo;
  size_t n;
  const char* name;
  std::vector<Cell> cells;
};
struct State {
  bool on = false;
  uint32_t bep = 1;
  std::vector<uint32_t> wep;
  std::vector<Buf> bufs;
};
thread_local State S;
bool g_instrumented = false;

std::string thread_str(int t) {
  const dim3 b = g_pos->block;
  return str_cat("thread (", t % (int)b.x, ", ", (t / (int)b.x) % (int)b.y, ", ", t / (int)(b.x * b.y), ")");
}

bool ordered(int who, uint32_t b, uint32_t w, int me) {
  if (b != S.bep) return true;
  return who >= 0 && (who >> 5) == (me >> 5) && w != S.wep[(size_t)(me >> 5)];
}

void access(const void* addr, size_t size, bool write) {
  if (!S.on || !g_pos) return;
  const char* a = static_cast<const char*>(addr);
  for (Buf& b : S.bufs) {
    if (a + size <= b.lo || a >= b.lo + b.n) continue;
    const int me = g_pos->linear;
    const uint32_t mw = S.wep[(size_t)(me >> 5)];
    for (size_t i = 0; i < size; ++i) {
      if (a + i < b.lo || a + i >= b.lo + b.n) continue;  // the out-of-range part: ASan's job
      const size_t off = (size_t)(a + i - b.lo);
      Cell& c = b.cells[off];
      const auto where = [&] { return str_cat(b.name, " byte ", off); };
      if (!write) {
        if (!c.init)
          fault(str_cat("uninitialised shared-memory read: ", thread_str(me), " reads ", where(),
                        ", which no thread wrote"));
        if (c.writer >= 0 && c.writer != me && !ordered(c.writer, c.wb, c.ww, me))
          fault(str_cat("shared-memory race (read after write): ", thread_str(me), " reads ", where(), " that ",
                        thread_str(c.writer), " wrote with no __syncthreads between"));
        if (c.reader == -1 || ordered(c.reader, c.rb, c.rw, me)) {
          c.reader = me;
          c.rb = S.bep;
          c.rw = mw;
        } else if (c.reader != me) {
          c.reader = -2;
          c.rb = S.bep;
        }
      } else {
        if (c.writer >= 0 && c.writer != me && !ordered(c.writer, c.wb, c.ww, me))
          fault(str_cat("shared-memory race (write after write): ", thread_str(me), " writes ", where(), " that ",
                        thread_str(c.writer), " wrote with no __syncthreads between"));
        if (c.reader != -1 && c.reader != me && !ordered(c.reader, c.rb, c.rw, me))
          fault(str_cat("shared-memory race (write after read): ", thread_str(me), " writes ", where(), " that ",
                        c.reader >= 0 ? thread_str(c.reader) : std::string("other threads"),
                        " read with no __syncthreads between"));
        c.writer = me;
        c.wb = S.bep;
        c.ww = mw;
        c.init = true;
      }
    }
    return;
  }
}

}  // namespace

void block_begin(int warps) {
  // Only where the kernel sources report their accesses: the runtime's own (cp.async, ldmatrix) alone
  // would see every plain store as missing.
  S.on = g_instrumented;
  S.bep = 1;
  S.wep.assign((size_t)warps, 1);
  S.bufs.clear();
}
void add_buffer(void* p, size_t n, const char* name) {
  if (S.on) S.bufs.push_back(Buf{static_cast<char*>(p), n, name, std::vector<Cell>(n)});
}
void block_end() {
  S.on = false;
  S.bufs.clear();
}
void barrier() { ++S.bep; }
void warp_barrier(int w) { ++S.wep[(size_t)w]; }
bool instrumented() { return g_instrumented; }
void note(const void* p, size_t n, bool write) { access(p, n, write); }

// ---- the hooks GCC's -fsanitize=thread calls (C names; the namespace does not change them) ----
extern "C" {
void __tsan_init() { g_instrumented = true; }
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
#define KILN_TSAN_RW(n)                                                                       \
  void __tsan_read##n(void* a) { access(a, n, false); }                                  \
  void __tsan_write##n(void* a) { access(a, n, true); }                                  \
  void __tsan_unaligned_read##n(void* a) { access(a, n, false); }                        \
  void __tsan_unaligned_write##n(void* a) { access(a, n, true); }                        \
  void __tsan_volatile_read##n(void* a) { access(a, n, false); }                         \
  void __tsan_volatile_write##n(void* a) { access(a, n, true); }
KILN_TSAN_RW(1)
KILN_TSAN_RW(2)
KILN_TSAN_RW(4)
KILN_TSAN_RW(8)
KILN_TSAN_RW(16)
#undef KILN_TSAN_RW
void __tsan_read_range(void* a, unsigned long n) { access(a, n, false); }
void __tsan_write_range(void* a, unsigned long n) { access(a, n, true); }
void* __tsan_memcpy(void* d, const void* s, unsigned long n) {
  access(s, n, false);
  access(d, n, true);
  return std::memcpy(d, s, n);
}
void* __tsan_memmove(void* d, const void* s, unsigned long n) {
  access(s, n, false);
  access(d, n, true);
  return std::memmove(d, s, n);
}
void* __tsan_memset(void* d, int v, unsigned long n) {
  access(d, n, true);
  return std::memset(d, v, n);
}
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) {}
#define KILN_TSAN_ATOMIC(bits, T)                                                                         \
  T __tsan_atomic##bits##_load(const volatile T* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); } \
  void __tsan_atomic##bits##_store(volatile T* a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_exchange(volatile T* a, T v, int) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_fetch_add(volatile T* a, T v, int) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_fetch_sub(volatile T* a, T v, int) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_fetch_and(volatile T* a, T v, int) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_fetch_or(volatile T* a, T v, int) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }   \
  T __tsan_atomic##bits##_fetch_xor(volatile T* a, T v, int) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
  T __tsan_atomic##bits##_fetch_nand(volatile T* a, T v, int) { return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST); } \
  int __tsan_atomic##bits##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {                \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);               \
  }                                                                                                       \
  int __tsan_atomic##bits##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {                  \
    return __atomic_compare_exchange_n(a, c, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                \
  }                                                                                                       \
  T __tsan_atomic##bits##_compare_exchange_val(volatile T* a, T c, T v, int, int) {                      \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                     \
    return c;                                                                                             \
  }
KILN_TSAN_ATOMIC(8, uint8_t)
KILN_TSAN_ATOMIC(16, uint16_t)
KILN_TSAN_ATOMIC(32, uint32_t)
KILN_TSAN_ATOMIC(64, uint64_t)
#undef KILN_TSAN_ATOMIC
}  // extern "C"

}  // namespace kiln::cuda_on_cpu::shadow
