// kiln::UsageError: a command line that is wrong by itself (a bad flag value, flags that contradict
// each other), found after the flags were parsed. `kiln` exits 2 for it, as for a flag it cannot
// parse, and 1 for any other kiln::Error (a run or data error). Must not depend on anything above
// engine/core.
#pragma once
#include "engine/core/error.h"

namespace kiln {

class UsageError : public Error {
 public:
  explicit UsageError(const std::string& msg) : Error(msg) {}
};

}  // namespace kiln

// KILN_USAGE_CHECK(cond, "--flag ...") throws kiln::UsageError with the pieces joined.
#define KILN_USAGE_CHECK(cond, ...)                                      \
  do {                                                                   \
    if (!(cond)) throw ::kiln::UsageError(::kiln::str_cat(__VA_ARGS__)); \
  } while (0)
