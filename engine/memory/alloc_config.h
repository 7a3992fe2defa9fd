// CachingAllocator configuration (by struct, or parsed from KILN_ALLOC_CONF), plus the byte-size
// helpers the allocator's messages and the command line share: parse_bytes("6G") and
// format_bytes(n) -> "6.00 GiB". Pure functions: no allocator state here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

struct AllocatorConfig {
  size_t round = 512;                    // every block size is a multiple (power of two, >= 16)
  size_t small_max = size_t(1) << 20;    // requests <= this go to the small pool
  size_t small_segment = size_t(2) << 20;  // segment size of the small pool
  size_t large_round = size_t(2) << 20;  // large segments are rounded up to this
  // Large requests below half of this share segments of this size (so their blocks can split
  // and coalesce); bigger ones map their own segment. 0: every large request maps its own.
  size_t large_segment = size_t(20) << 20;
  // Expandable arena: when the provider can reserve address space and commit memory to it piece
  // by piece (host, meta; see Provider::granule), small and large blocks share one growable
  // range, grown and shrunk at its end in `granule` steps, so every free neighbour coalesces and
  // a request that fits no hole extends the free tail instead of mapping a fresh segment. The
  // segment settings above then apply only to providers without it (cuda, pinned).
  bool expandable = true;
  size_t granule = size_t(512) << 10;     // commit step (raised to the provider's own granule)
  // Arena placement: a free hole is taken when it is at most this many percent larger than the
  // request, else the free tail is bumped; SIZE_MAX ("hole_fit=off") is plain best fit.
  size_t hole_fit_pct = 25;
  size_t max_split = SIZE_MAX;           // free blocks >= this are never split (fragmentation cap)
  bool debug = false;                    // poison freed memory, check it on reuse (host memory only)
  size_t trace_capacity = 0;             // event ring entries; 0 = tracing off

  // Throws kiln::Error naming the bad field when the values do not make sense.
  void validate() const;
};

// Parses "round=512,small_segment=2M,large_round=2M,max_split=64M,debug,trace=100000" over the
// defaults in `base`. Unknown keys and bad numbers throw kiln::Error naming the text.
AllocatorConfig parse_alloc_conf(const std::string& text, AllocatorConfig base = {});
// The defaults, overridden by the KILN_ALLOC_CONF environment variable when it is set.
AllocatorConfig alloc_config_from_env();

// "6G", "512M", "64MiB", "1.5GiB", "4096", "2k": binary units (K = 1024), case-insensitive.
// Throws kiln::Error naming the text on anything else.
size_t parse_bytes(const std::string& text);
// Human-readable: "512 B", "3.50 KiB", "1.25 GiB".
std::string format_bytes(double bytes);

}  // namespace kiln
