// Every percentage kiln prints (the epoch line, `kiln runs`, `kiln predict`, the reports) comes from here,
// so one number is written one way everywhere: 100 * count / total from the integer counts, rounded half
// away from zero to two decimals ("91.67%" for 11 of 12, never the truncated 91.66%). Text only.
#pragma once
#include <cstdint>
#include <string>

namespace kiln {

// 100 * count / total in hundredths of a percent, rounded half away from zero, in integer arithmetic
// (exact for counts up to 4.6e14). total must be > 0.
int64_t percent_hundredths(int64_t count, int64_t total);
// "91.67%"; "-" when total <= 0.
std::string percent_text(int64_t count, int64_t total);
// The same rule for a ratio that is no count ratio (a mean IoU) or has lost its counts (an older
// ledger's accuracy): 100 * fraction rounded half away from zero to two decimals.
std::string percent_text(double fraction);

}  // namespace kiln
