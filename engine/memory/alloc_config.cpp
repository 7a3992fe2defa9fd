// KILN_ALLOC_CONF parsing and byte-size helpers (see alloc_config.h).
#include "engine/memory/alloc_config.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "engine/core/error.h"

namespace kiln {

namespace {
bool is_pow2(size_t v) { return v && !(v & (v - 1)); }
std::string lower(std::string s) {
  for (char& c : s) c = (char)std::tolower((unsigned char)c);
  return s;
}
std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}
}  // namespace

size_t parse_bytes(const std::string& text) {
  std::string t = trim(text);
  const char* s = t.c_str();
  char* end = nullptr;
  double v = std::strtod(s, &end);
  KILN_CHECK(end != s && std::isfinite(v) && v >= 0, "parse_bytes: '", text,
             "' is not a byte size (expected e.g. 6G, 512M, 64MiB, 4096)");
  std::string unit = lower(trim(end));
  double mul = 0;
  if (unit.empty() || unit == "b") mul = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") mul = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") mul = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib") mul = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tb" || unit == "tib") mul = 1024.0 * 1024 * 1024 * 1024;
  KILN_CHECK(mul > 0, "parse_bytes: unknown unit '", unit, "' in '", text,
             "' (expected B, K, M, G, T, optionally with B or iB)");
  double bytes = v * mul;
  KILN_CHECK(bytes < 9.0e18, "parse_bytes: '", text, "' is too large");
  KILN_CHECK(bytes == std::floor(bytes), "parse_bytes: '", text, "' is not a whole number of bytes");
  return (size_t)bytes;
}

std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  bool neg = b < 0;
  double a = std::fabs(b);
  int u = 0;
  while (a >= 1024.0 && u < 4) {
    a /= 1024.0;
    ++u;
  }
  char buf[48];
  if (u == 0) std::snprintf(buf, sizeof buf, "%s%.0f B", neg ? "-" : "", a);
  else std::snprintf(buf, sizeof buf, "%s%.2f %s", neg ? "-" : "", a, units[u]);
  return buf;
}

void AllocatorConfig::validate() const {
  KILN_CHECK(is_pow2(round) && round >= 16, "allocator config: round=", round,
             " must be a power of two >= 16");
  KILN_CHECK(small_max >= round, "allocator config: small_max=", small_max, " is below round=", round);
  KILN_CHECK(small_segment >= small_max && small_segment % round == 0, "allocator config: small_segment=",
             small_segment, " must be >= small_max=", small_max, " and a multiple of round=", round);
  KILN_CHECK(large_round >= round && large_round % round == 0, "allocator config: large_round=",
             large_round, " must be a multiple of round=", round);
  KILN_CHECK(large_segment % large_round == 0, "allocator config: large_segment=", large_segment,
             " must be a multiple of large_round=", large_round);
  KILN_CHECK(is_pow2(granule) && granule >= 4096 && granule % round == 0, "allocator config: granule=", granule,
             " must be a power of two >= 4096 and a multiple of round=", round);
  KILN_CHECK(max_split > small_max, "allocator config: max_split=", max_split,
             " must exceed small_max=", small_max);
}

AllocatorConfig parse_alloc_conf(const std::string& text, AllocatorConfig c) {
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string item = trim(text.substr(pos, comma - pos));
    pos = comma + 1;
    if (item.empty()) continue;
    size_t eq = item.find('=');
    std::string key = lower(trim(item.substr(0, eq)));
    std::string val = eq == std::string::npos ? "" : trim(item.substr(eq + 1));
    auto need = [&]() -> size_t {
      KILN_CHECK(!val.empty(), "KILN_ALLOC_CONF: '", key, "' needs a value (", key, "=...)");
      return parse_bytes(val);
    };
    if (key == "debug") c.debug = val.empty() || val == "1" || lower(val) == "true";
    else if (key == "round") c.round = need();
    else if (key == "small_max") c.small_max = need();
    else if (key == "small_segment") c.small_segment = need();
    else if (key == "large_round") c.large_round = need();
    else if (key == "large_segment") c.large_segment = need();
    else if (key == "max_split") c.max_split = need();
    else if (key == "trace") c.trace_capacity = need();
    else if (key == "expandable") c.expandable = val.empty() || val == "1" || lower(val) == "true";
    else if (key == "granule") c.granule = need();
    else if (key == "hole_fit") {
      if (lower(val) == "off") c.hole_fit_pct = SIZE_MAX;
      else {
        char* end = nullptr;
        long v = std::strtol(val.c_str(), &end, 10);
        KILN_CHECK(!val.empty() && *end == 0 && v >= 0 && v <= 100000, "KILN_ALLOC_CONF: hole_fit=", val,
                   " must be a percentage (0..100000) or off");
        c.hole_fit_pct = (size_t)v;
      }
    }
    else
      throw Error(str_cat("KILN_ALLOC_CONF: unknown key '", key, "' in '", text,
                          "' (known: round, small_max, small_segment, large_round, large_segment, max_split, expandable, granule, hole_fit, debug, trace)"));
  }
  c.validate();
  return c;
}

AllocatorConfig alloc_config_from_env() {
  const char* e = std::getenv("KILN_ALLOC_CONF");
  return e ? parse_alloc_conf(e) : AllocatorConfig{};
}

}  // namespace kiln
