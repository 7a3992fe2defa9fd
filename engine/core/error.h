// kiln::Error and KILN_CHECK: every user-facing failure is one exception with context
// (op, shapes, file, device). Must not depend on anything above engine/core.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// Thrown by allocators when a device (real or simulated) cannot serve a request; the message
// carries the full memory account (see engine/memory).
class OutOfMemory : public Error {
 public:
  explicit OutOfMemory(const std::string& msg) : Error(msg) {}
};

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  append(os, rest...);
}
}  // namespace detail

// Builds a message from any streamable pieces: str_cat("conv2d: x ", shape_str(s)).
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  return os.str();
}

}  // namespace kiln

// KILN_CHECK(cond, "op: ", what, ...) throws kiln::Error with the pieces joined.
#define KILN_CHECK(cond, ...)                                  \
  do {                                                         \
    if (!(cond)) throw ::kiln::Error(::kiln::str_cat(__VA_ARGS__)); \
  } while (0)
