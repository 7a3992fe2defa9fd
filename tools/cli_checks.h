// Range checks of numeric flags with short messages: CLI11's PositiveNumber and NonNegativeNumber
// print their range with the limits of double (~300 digits for `--lr 0`); these say "must be > 0,
// got 0". Only the message differs; a value they pass converts as before.
#pragma once
#include <CLI/CLI.hpp>

#include <string>

namespace kiln_cli {

namespace detail {
inline std::string number_check(const std::string& s, bool allow_zero) {
  double v = 0;
  size_t used = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size()) return "'" + s + "' is not a number";
  if (allow_zero ? v >= 0 : v > 0) return "";
  return std::string(allow_zero ? "must be >= 0" : "must be > 0") + ", got " + s;
}
}  // namespace detail

inline const CLI::Validator positive(
    [](std::string& s) { return detail::number_check(s, false); }, "> 0", "POSITIVE");
inline const CLI::Validator non_negative(
    [](std::string& s) { return detail::number_check(s, true); }, ">= 0", "NONNEGATIVE");

}  // namespace kiln_cli
