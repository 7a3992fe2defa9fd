// Reads each kernel's resource usage from a built CUDA object file (what `cuobjdump
// --dump-resource-usage` prints; this toolkit has no cuobjdump): the host object's .nv_fatbin section
// holds one fatbin; its ELF entries (kind 2; uncompressed with nvcc 13.0, only the PTX entries are
// zstd-compressed) are the cubins, one per real architecture. In a cubin, per kernel: registers are bits
// 24-31 of the `.text.<kernel>` section's sh_info (sm_80; sm_90 cubins leave them 0) and EIATTR_REGCOUNT
// (0x2f) in the global `.nv.info` (both), static shared memory is the size of
// `.nv.shared.<kernel>`, the __launch_bounds__ thread count is EIATTR_MAX_THREADS (0x05) in
// `.nv.info.<kernel>`, and the stack frame is EIATTR_FRAME_SIZE (0x11) / EIATTR_MIN_STACK_SIZE (0x12) in
// the global `.nv.info`, keyed by symbol index. Test support only: reads files, throws std::runtime_error
// naming the file on anything malformed; knows nothing about kiln's kernels.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln::test::cubin {

struct KernelUsage {
  int regs = -1;
  int64_t static_smem = 0;    // the kernel's own __shared__ bytes
  int64_t reserved_smem = 0;  // sm_90: the 1 KiB at the start of .nv.shared.<kernel> that the system reserves
  int max_threads = -1;  // -1: no __launch_bounds__ recorded
  int64_t stack = 0;     // max(frame size, min stack size): 0 means no local memory and so no spills
};
// arch (80, 90) -> mangled kernel name -> usage
using ArchKernels = std::map<int, std::map<std::string, KernelUsage>>;

namespace detail {

template <class T> T rd(const std::string& b, size_t off, const std::string& what) {
  if (off + sizeof(T) > b.size()) throw std::runtime_error(what + ": truncated at byte " + std::to_string(off));
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

struct Section {
  std::string name;
  uint32_t type = 0, link = 0, info = 0;
  uint64_t off = 0, size = 0, entsize = 0;
};

// The section table of an ELF64 little-endian image.
inline std::vector<Section> sections(const std::string& e, const std::string& what) {
  if (e.size() < 64 || e.compare(0, 4, "\x7f" "ELF") != 0 || e[4] != 2)
    throw std::runtime_error(what + ": not an ELF64 image");
  const uint64_t shoff = rd<uint64_t>(e, 0x28, what);
  const uint16_t shentsize = rd<uint16_t>(e, 0x3a, what), shnum = rd<uint16_t>(e, 0x3c, what),
                 shstrndx = rd<uint16_t>(e, 0x3e, what);
  std::vector<Section> s(shnum);
  for (size_t i = 0; i < shnum; ++i) {
    const size_t h = shoff + i * shentsize;
    s[i].name = std::to_string(rd<uint32_t>(e, h, what));  // offset for now, resolved below
    s[i].type = rd<uint32_t>(e, h + 4, what);
    s[i].off = rd<uint64_t>(e, h + 0x18, what);
    s[i].size = rd<uint64_t>(e, h + 0x20, what);
    s[i].link = rd<uint32_t>(e, h + 0x28, what);
    s[i].info = rd<uint32_t>(e, h + 0x2c, what);
    s[i].entsize = rd<uint64_t>(e, h + 0x38, what);
  }
  if (shstrndx >= shnum) throw std::runtime_error(what + ": bad section-name table index");
  const Section& str = s[shstrndx];
  for (auto& sec : s) {
    const size_t at = str.off + std::stoul(sec.name);
    const size_t end = e.find('\0', at);
    if (end == std::string::npos) throw std::runtime_error(what + ": unterminated section name");
    sec.name = e.substr(at, end - at);
  }
  return s;
}

inline bool starts(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// One cubin: every kernel (a section `.nv.info.<name>`) and its usage.
inline std::map<std::string, KernelUsage> read_cubin(const std::string& e, const std::string& what) {
  const auto secs = sections(e, what);
  std::map<std::string, KernelUsage> out;
  std::vector<std::string> symname;  // symbol index -> name
  for (const auto& s : secs) {
    if (s.type != 2 /* SHT_SYMTAB */) continue;
    const Section& str = secs.at(s.link);
    for (uint64_t o = 0; o + 24 <= s.size; o += 24) {
      const size_t at = str.off + rd<uint32_t>(e, s.off + o, what);
      symname.push_back(e.substr(at, e.find('\0', at) - at));
    }
  }
  // .nv.info* records: {u8 format, u8 attribute, payload}; format 1 none, 2 one byte (+ pad), 3 u16, 4 u16
  // size + bytes; a 0x0000 pair pads (seen after EIATTR 0x35 in nvcc 13.0's output).
  auto records = [&](const Section& s, auto&& fn) {
    for (uint64_t p = 0; p + 2 <= s.size;) {
      const uint8_t fmt = (uint8_t)e[s.off + p], attr = (uint8_t)e[s.off + p + 1];
      p += 2;
      uint64_t len = 0;
      if (fmt == 2) len = 2;
      else if (fmt == 3) len = 2;
      else if (fmt == 4) len = rd<uint16_t>(e, s.off + p, what), p += 2;
      else if (fmt > 1) throw std::runtime_error(what + ": unknown .nv.info record format in " + s.name);
      if (p + len > s.size) throw std::runtime_error(what + ": truncated record in " + s.name);
      fn(attr, fmt, s.off + p, len);
      p += len;
    }
  };
  for (const auto& s : secs)
    if (starts(s.name, ".nv.info.")) {
      KernelUsage& u = out[s.name.substr(9)];
      records(s, [&](uint8_t attr, uint8_t fmt, uint64_t at, uint64_t len) {
        if (attr == 0x05 && fmt == 4 && len == 12)  // EIATTR_MAX_THREADS: x, y, z
          u.max_threads = (int)(rd<uint32_t>(e, at, what) * rd<uint32_t>(e, at + 4, what) * rd<uint32_t>(e, at + 8, what));
      });
    }
  bool has_reserved = false;
  for (const auto& s : secs) {
    if (starts(s.name, ".text.")) {  // sm_80 cubins also keep the count in sh_info's top byte; sm_90 do not
      auto it = out.find(s.name.substr(6));
      if (it != out.end() && it->second.regs < 0 && (s.info >> 24) != 0) it->second.regs = (int)(s.info >> 24);
    } else if (starts(s.name, ".nv.shared.reserved.")) {
      has_reserved = true;
    } else if (starts(s.name, ".nv.shared.")) {
      auto it = out.find(s.name.substr(11));
      if (it != out.end()) it->second.static_smem = (int64_t)s.size;
    } else if (s.name == ".nv.info") {
      records(s, [&](uint8_t attr, uint8_t fmt, uint64_t at, uint64_t len) {
        // REGCOUNT (0x2f), FRAME_SIZE (0x11), MIN_STACK_SIZE (0x12): {u32 symbol index, u32 value}
        if ((attr == 0x11 || attr == 0x12 || attr == 0x2f) && fmt == 4 && len == 8) {
          const uint32_t sym = rd<uint32_t>(e, at, what), v = rd<uint32_t>(e, at + 4, what);
          auto it = sym < symname.size() ? out.find(symname[sym]) : out.end();
          if (it == out.end()) return;
          if (attr == 0x2f) it->second.regs = (int)v;
          else it->second.stack = std::max<int64_t>(it->second.stack, v);
        }
      });
    }
  }
  // With a .nv.shared.reserved.* section (sm_90), each kernel's shared section starts with the 1 KiB the
  // system reserves per block (cudaDevAttrReservedSharedMemoryPerBlock), outside the 48 / 227 KiB limits.
  if (has_reserved)
    for (auto& kv : out)
      if (kv.second.static_smem >= 1024) kv.second.static_smem -= 1024, kv.second.reserved_smem = 1024;
  return out;
}

}  // namespace detail

// Every cubin in a host object file built by nvcc (one fatbin in section .nv_fatbin).
inline ArchKernels read_object(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string o = ss.str();
  using detail::rd;
  ArchKernels out;
  const auto secs = detail::sections(o, path);
  const detail::Section* fat = nullptr;
  for (const auto& s : secs)
    if (s.name == ".nv_fatbin") fat = &s;
  if (!fat) throw std::runtime_error(path + ": no .nv_fatbin section (not an nvcc object?)");
  const std::string d = o.substr(fat->off, fat->size);
  int entries = 0;
  for (size_t off = 0; off + 16 <= d.size();) {
    if (rd<uint32_t>(d, off, path) != 0xBA55ED50u) {  // fatbins are 8-byte aligned; skip padding
      off += 8;
      continue;
    }
    const uint16_t hs = rd<uint16_t>(d, off + 6, path);
    const uint64_t fs = rd<uint64_t>(d, off + 8, path);
    const uint64_t end = off + hs + fs;
    for (uint64_t p = off + hs; p < end;) {
      const uint16_t kind = rd<uint16_t>(d, p, path);
      const uint32_t ehs = rd<uint32_t>(d, p + 4, path);
      const uint64_t size = rd<uint64_t>(d, p + 8, path);
      const uint32_t arch = rd<uint32_t>(d, p + 28, path);
      const uint64_t flags = rd<uint64_t>(d, p + 40, path);
      if (kind == 2) {  // ELF (SASS)
        const std::string what = path + " (cubin sm_" + std::to_string(arch) + ")";
        if (p + ehs + size > d.size()) throw std::runtime_error(what + ": truncated");
        // flags 0x2000 (LZ4) / 0x8000 (zstd): compressed; nvcc 13.0 compresses only the PTX entries.
        if ((flags & 0xA000) || d.compare(p + ehs, 4, "\x7f" "ELF") != 0)
          throw std::runtime_error(what + ": compressed cubin (build with nvcc --no-compress)");
        for (auto& kv : detail::read_cubin(d.substr(p + ehs, size), what)) out[(int)arch][kv.first] = kv.second;
        ++entries;
      }
      p += ehs + size;
    }
    off = end;
  }
  if (entries == 0) throw std::runtime_error(path + ": its fatbin holds no cubin (PTX only?)");
  return out;
}

}  // namespace kiln::test::cubin
