// Percentages from counts (see percent.h).
#include "engine/core/percent.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "engine/core/error.h"

namespace kiln {

int64_t percent_hundredths(int64_t count, int64_t total) {
  KILN_CHECK(total > 0, "percent_hundredths: total ", total, " must be > 0");
  const int64_t a = std::llabs(count) * 10000;
  const int64_t h = (2 * a + total) / (2 * total);  // half away from zero on the magnitude
  return count < 0 ? -h : h;
}

static std::string hundredths_text(int64_t h) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s%lld.%02lld%%", h < 0 ? "-" : "", (long long)(std::llabs(h) / 100),
                (long long)(std::llabs(h) % 100));
  return buf;
}

std::string percent_text(int64_t count, int64_t total) {
  if (total <= 0) return "-";
  return hundredths_text(percent_hundredths(count, total));
}

std::string percent_text(double fraction) {
  if (!std::isfinite(fraction)) return "-";
  return hundredths_text((int64_t)std::llround(fraction * 10000.0));  // llround: half away from zero
}

}  // namespace kiln
