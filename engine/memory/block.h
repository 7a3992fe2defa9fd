// Internal bookkeeping of CachingAllocator: blocks (address ranges inside a segment), segments,
// the size-class bins with their bitmap, and the pointer -> block map. Header-only so the hot
// path inlines. Not part of the public API: only caching_allocator*.cpp include it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/memory/allocator.h"
#include "engine/memory/event_source.h"
#include "engine/memory/stats.h"

namespace kiln {
namespace detail {

enum class BlockState : uint8_t { free, allocated, pending };

struct Segment;

// One address range [ptr, ptr+size) of a segment. Blocks of a segment tile it exactly, in
// address order through prev/next.
struct Block {
  Segment* seg = nullptr;
  char* ptr = nullptr;
  size_t size = 0;        // bytes, a multiple of config.round
  size_t requested = 0;   // bytes asked for (allocated blocks)
  Block* prev = nullptr;  // address neighbours in the segment
  Block* next = nullptr;
  Block* bin_prev = nullptr;  // free list of its bin (free blocks)
  Block* bin_next = nullptr;
  StreamId stream = 0;  // the stream the block was last allocated on
  EventId event = 0;    // free blocks: recorded on `stream` at free time; 0 = settled
  uint64_t id = 0;      // allocation number (traces)
  uint32_t module = 0;  // interned module path
  int32_t rec = -1;     // index in the recorded step (plan mode), -1 when not recorded
  uint32_t rec_gen = 0; // which recording `rec` belongs to
  int16_t bin = -1;     // bin index while in a bin
  int32_t plan_idx = -1;   // planned blocks: the request of the plan it serves
  uint32_t plan_gen = 0;   // ... of which plan
  uint32_t arena_pos = 0;  // its slot in the allocator's list of live planned blocks
  MemoryTag tag = MemoryTag::other;
  Pool pool = Pool::small;  // the pool its allocation is counted in (by request size)
  BlockState state = BlockState::free;
  bool planned = false;  // served from the plan arena (not linked into a segment's list)
};

// Debug mode fills freed memory with this byte.
constexpr unsigned char kPoisonByte = 0xDB;

// Block::event value meaning "known finished" (0 means "no event recorded yet").
constexpr EventId kSettled = ~EventId(0);

// A segment: [base, base+size) mapped by the provider, or, for the expandable arena, the
// committed front of a reserved range of `reserved` bytes that grows and shrinks at its end.
struct Segment {
  char* base = nullptr;
  size_t size = 0;
  Pool pool = Pool::small;
  Block* first = nullptr;
  Block* last = nullptr;
  uint64_t id = 0;
  size_t reserved = 0;     // expandable arena: reserved address bytes; 0 for a mapped segment
  bool growable() const { return reserved != 0; }
};

// Size-class bins: 4 classes per power of two (class = 4*floor(log2 s) + next two bits), each a
// doubly linked free list, and a 256-bit bitmap of the non-empty ones so the first non-empty
// class >= c is found with at most four bit scans.
class SizeBins {
 public:
  static constexpr int kBins = 256;
  static int bin_of(size_t s) {
    int fl = 63 - __builtin_clzll((unsigned long long)s);
    int sl = fl >= 2 ? (int)((s >> (fl - 2)) & 3) : 0;
    return fl * 4 + sl;
  }
  SizeBins() {
    std::memset(head_, 0, sizeof head_);
    std::memset(bits_, 0, sizeof bits_);
  }
  Block* head(int b) const { return head_[b]; }
  void insert(Block* blk) {
    int b = bin_of(blk->size);
    blk->bin = (int16_t)b;
    blk->bin_prev = nullptr;
    blk->bin_next = head_[b];
    if (head_[b]) head_[b]->bin_prev = blk;
    head_[b] = blk;
    bits_[b >> 6] |= uint64_t(1) << (b & 63);
  }
  void remove(Block* blk) {
    int b = blk->bin;
    if (blk->bin_prev) blk->bin_prev->bin_next = blk->bin_next;
    else head_[b] = blk->bin_next;
    if (blk->bin_next) blk->bin_next->bin_prev = blk->bin_prev;
    if (!head_[b]) bits_[b >> 6] &= ~(uint64_t(1) << (b & 63));
    blk->bin = -1;
    blk->bin_prev = blk->bin_next = nullptr;
  }
  // First non-empty bin >= from, or -1.
  int next_nonempty(int from) const {
    if (from >= kBins) return -1;
    int w = from >> 6;
    uint64_t m = bits_[w] & (~uint64_t(0) << (from & 63));
    while (true) {
      if (m) return (w << 6) + __builtin_ctzll(m);
      if (++w == 4) return -1;
      m = bits_[w];
    }
  }
  // Highest non-empty bin, or -1.
  int last_nonempty() const {
    for (int w = 3; w >= 0; --w)
      if (bits_[w]) return (w << 6) + 63 - __builtin_clzll(bits_[w]);
    return -1;
  }

 private:
  Block* head_[kBins];
  uint64_t bits_[4];
};

// Open-addressing map from a block's address to the block (linear probing, backward-shift
// delete): the free path's lookup without a node allocation per block.
class PtrMap {
 public:
  PtrMap() { rehash(1024); }
  size_t size() const { return count_; }
  void insert(const void* key, Block* v) {
    if ((count_ + 1) * 2 > cap_) rehash(cap_ * 2);
    size_t i = slot(key);
    while (keys_[i]) i = (i + 1) & (cap_ - 1);
    keys_[i] = key;
    vals_[i] = v;
    ++count_;
  }
  Block* find(const void* key) const {
    size_t i = slot(key);
    while (keys_[i]) {
      if (keys_[i] == key) return vals_[i];
      i = (i + 1) & (cap_ - 1);
    }
    return nullptr;
  }
  // Removes and returns the entry, or nullptr when absent.
  Block* erase(const void* key) {
    size_t i = slot(key);
    while (keys_[i] && keys_[i] != key) i = (i + 1) & (cap_ - 1);
    if (!keys_[i]) return nullptr;
    Block* v = vals_[i];
    // backward shift: pull later entries of the probe run into the hole
    size_t hole = i, j = i;
    while (true) {
      j = (j + 1) & (cap_ - 1);
      if (!keys_[j]) break;
      size_t home = slot(keys_[j]);
      bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
      if (movable) {
        keys_[hole] = keys_[j];
        vals_[hole] = vals_[j];
        hole = j;
      }
    }
    keys_[hole] = nullptr;
    --count_;
    return v;
  }

 private:
  size_t slot(const void* key) const {
    uint64_t h = (uint64_t)(uintptr_t)key * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> shift_);
  }
  void rehash(size_t cap) {
    std::vector<const void*> ok;
    std::vector<Block*> ov;
    ok.swap(keys_);
    ov.swap(vals_);
    cap_ = cap;
    shift_ = 64 - __builtin_ctzll(cap);
    keys_.assign(cap, nullptr);
    vals_.assign(cap, nullptr);
    count_ = 0;
    for (size_t i = 0; i < ok.size(); ++i)
      if (ok[i]) insert(ok[i], ov[i]);
  }
  std::vector<const void*> keys_;
  std::vector<Block*> vals_;
  size_t cap_ = 0, count_ = 0;
  int shift_ = 64;
};

}  // namespace detail
}  // namespace kiln
