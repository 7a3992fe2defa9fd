// Host bodies of the GEMM's PTX instructions (ptx_host.h).
#include "kernels/cuda_cpu/ptx_host.h"

#include <cstring>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/half.h"
#include "kernels/cuda_cpu/grid_runner.h"
#include "kernels/cuda_cpu/shadow.h"

namespace kiln::cuda_on_cpu {
namespace {

struct AsyncCopy {
  char* dst;
  const char* src;
  int src_bytes;
  uint32_t group;
};
struct ThreadCopies {
  std::vector<AsyncCopy> pending;
  uint32_t open_group = 0;  // groups committed so far; the open group has this index
};
thread_local std::vector<ThreadCopies> t_copies;

char* shared_base() { return static_cast<char*>(dynamic_shared_bytes()); }

char* shared_ptr(uint32_t addr, size_t n, const char* what) {
  const size_t size = dynamic_shared_size();
  if ((size_t)addr + n > size)
    fault(str_cat(what, ": shared address ", addr, " + ", n, " bytes is outside the ", size,
                  " bytes of dynamic shared memory"));
  return shared_base() + addr;
}

float h2f(uint16_t h) { return half_bits_to_float(h); }

}  // namespace

void ptx_block_begin(int threads) { t_copies.assign((size_t)threads, ThreadCopies{}); }

uint32_t ptx_shared_address(const void* p) {
  const char* c = static_cast<const char*>(p);
  const char* base = shared_base();
  if (c < base || c > base + dynamic_shared_size())
    fault("__cvta_generic_to_shared of a pointer outside the block's dynamic shared memory");
  return (uint32_t)(c - base);
}

void ptx_cp_async16(uint32_t dst, const void* src, int src_bytes) {
  if (src_bytes < 0 || src_bytes > 16) fault(str_cat("cp.async: src-size ", src_bytes, " is not 0..16"));
  if (dst % 16 != 0 || (reinterpret_cast<uintptr_t>(src) & 15) != 0)
    fault(str_cat("cp.async.cg 16: misaligned (shared ", dst, ", global ", src, ")"));
  ThreadCopies& t = t_copies[(size_t)g_pos->linear];
  t.pending.push_back(AsyncCopy{shared_ptr(dst, 16, "cp.async"), static_cast<const char*>(src), src_bytes, t.open_group});
}

void ptx_cp_async_commit() { ++t_copies[(size_t)g_pos->linear].open_group; }

void ptx_cp_async_wait(int n) {
  ThreadCopies& t = t_copies[(size_t)g_pos->linear];
  // Retires every committed group but the n most recent; the open (uncommitted) group is not waited for.
  const uint32_t keep_from = t.open_group >= (uint32_t)n ? t.open_group - (uint32_t)n : 0;
  std::vector<AsyncCopy> still;
  for (const AsyncCopy& c : t.pending) {
    if (c.group >= keep_from) {
      still.push_back(c);
      continue;
    }
    shadow::note(c.dst, 16, true);  // the issuing thread writes the 16 bytes now
    std::memcpy(c.dst, c.src, (size_t)c.src_bytes);
    std::memset(c.dst + c.src_bytes, 0, (size_t)(16 - c.src_bytes));
  }
  t.pending.swap(still);
}

void ptx_ldmatrix_x4(uint32_t (&r)[4], uint32_t addr, bool trans) {
  if (addr % 16 != 0) fault(str_cat("ldmatrix: row address ", addr, " is not 16-byte aligned"));
  const char* row = shared_ptr(addr, 16, "ldmatrix");
  shadow::note(row, 16, false);  // this lane's row, read by the warp
  unsigned char mine[16];
  std::memcpy(mine, row, 16);
  const unsigned char* rows = warp_gather(0xffffffffu, mine, 16, "ldmatrix");  // rows[16 * lane]
  const int lane = g_pos->linear & 31, g = lane >> 2, t = lane & 3;
  for (int j = 0; j < 4; ++j) {
    uint16_t e[2];
    for (int k = 0; k < 2; ++k) {
      // matrix j: row i lives in lane 8j + i; element c at byte 2c of that row
      const int i = trans ? 2 * t + k : g, c = trans ? g : 2 * t + k;
      std::memcpy(&e[k], rows + 16 * (8 * j + i) + 2 * c, 2);
    }
    r[j] = (uint32_t)e[0] | ((uint32_t)e[1] << 16);
  }
}

void ptx_mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  uint32_t ab[4] = {a[0], a[1], a[2], a[3]};
  // Copied out at once: the slots are reused by the warp's next-but-one collective.
  unsigned char A[32 * 16];
  std::memcpy(A, warp_gather(0xffffffffu, ab, 16, "mma.sync (A)"), sizeof A);
  uint32_t bb[2] = {b0, b1};
  unsigned char bcopy[8];
  std::memcpy(bcopy, bb, 8);
  const unsigned char* Bbytes = warp_gather(0xffffffffu, bcopy, 8, "mma.sync (B)");
  // Unpack the whole warp's fragments into A (16x16) and B (16x8) by the ISA's tables.
  float Am[16][16], Bm[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t = l & 3;
    uint16_t ah[8], bh[4];
    std::memcpy(ah, A + 16 * l, 16);
    std::memcpy(bh, Bbytes + 16 * l, 8);
    for (int i = 0; i < 8; ++i) {
      const int row = g + 8 * ((i >> 1) & 1), col = 2 * t + (i & 1) + 8 * (i >> 2);
      Am[row][col] = h2f(ah[i]);
    }
    for (int i = 0; i < 4; ++i) Bm[2 * t + (i & 1) + 8 * (i >> 1)][g] = h2f(bh[i]);
  }
  const int lane = g_pos->linear & 31, g = lane >> 2, t = lane & 3;
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float acc = d[i];
    for (int k = 0; k < 16; ++k) acc += Am[row][k] * Bm[k][col];
    d[i] = acc;
  }
}

}  // namespace kiln::cuda_on_cpu
