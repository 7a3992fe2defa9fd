// What a run holds outside kiln's allocator (see outside_memory.h).
#include "engine/run/outside_memory.h"

#include <cstdio>
#include <cstring>

#include "engine/memory/alloc_config.h"

namespace kiln {

int64_t peak_rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long long kb = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "VmHWM:", 6) == 0 && std::sscanf(line + 6, "%lld", &kb) == 1) break;
  std::fclose(f);
  return kb < 0 ? -1 : (int64_t)kb * 1024;
}

std::string outside_memory_line(Device device, int64_t peak_reserved, int64_t loader_bytes) {
  const int64_t rss = peak_rss_bytes();
  if (rss < 0) return "memory outside kiln's allocator: not measured (no /proc/self/status)";
  std::string s = "memory outside kiln's allocator: the process's peak RSS " + format_bytes((double)rss);
  if (device.is_cpu() && peak_reserved >= 0)
    s += " = kiln's allocator (" + format_bytes((double)peak_reserved) + " reserved at most) + " +
         format_bytes((double)(rss - peak_reserved)) + " outside it";
  s += ": the loader's host batch buffers (" +
       (loader_bytes > 0 ? "at most " + format_bytes((double)loader_bytes) : std::string("none: in-memory data")) +
       "), the set-up's host scratch, OpenBLAS's per-thread buffers, decoders, thread stacks, the program and its "
       "libraries";
  return s;
}

std::string outside_memory_note(int64_t loader_bytes) {
  return "not in these figures: what the run holds outside kiln's allocator (the loader's host batch buffers" +
         (loader_bytes > 0 ? ", at most " + format_bytes((double)loader_bytes) : std::string()) +
         "; OpenBLAS, decoders, thread stacks), measured against the process's peak RSS at the run's end";
}

}  // namespace kiln
