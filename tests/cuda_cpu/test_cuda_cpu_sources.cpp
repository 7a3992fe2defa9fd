// Source checks of the CPU execution mode's contract: every kernel in kernels/cuda states its
// __launch_bounds__ through KILN_KERNEL_BOUNDS (the CPU mode reads them from there), no kernel is
// launched with <<<>>> outside the one launch helper (kernels/cuda/kernel_launch.h), and shared memory
// is declared through KILN_SHARED / KILN_DYNAMIC_SHARED (the CPU mode's checked buffers). And the
// ASan mutation: an out-of-bounds shared-memory write is reported by AddressSanitizer (sanitizer build).
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda_cpu/prelude.h"
#include "kernels/cuda/kernel_launch.h"

namespace fs = std::filesystem;

#if defined(__SANITIZE_ADDRESS__)
#define KILN_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_TEST_ASAN 1
#endif
#endif

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("CPU mode sources: every kernel states KILN_KERNEL_BOUNDS, launches only through launch_kernel") {
  int kernels = 0;
  const std::regex global(R"(__global__\s+void\s+(\w+))");
  for (const auto& e : fs::directory_iterator(fs::path(KILN_SOURCE_DIR) / "kernels/cuda")) {
    const std::string ext = e.path().extension().string(), name = e.path().filename().string();
    if (ext != ".cu" && ext != ".h" && ext != ".cuh") continue;
    const std::string text = read_text(e.path());
    for (std::sregex_iterator it(text.begin(), text.end(), global), end; it != end; ++it) {
      ++kernels;
      CHECK_MESSAGE((*it)[1].str() == "KILN_KERNEL_BOUNDS", name, ": a __global__ without KILN_KERNEL_BOUNDS");
    }
    if (name != "kernel_launch.h") {
      CHECK_MESSAGE(text.find("<<<") == std::string::npos, name, ": a <<<>>> launch outside launch_kernel");
      CHECK_MESSAGE(text.find("__shared__") == std::string::npos, name, ": __shared__ instead of KILN_SHARED");
    }
  }
  MESSAGE(kernels, " __global__ kernel templates in kernels/cuda");
  CHECK(kernels >= 48);
}

namespace {

// The float -> integer scan (issue 33, defect 2). A host-compiled `(int)x` reproduces the CPU's x86
// behaviour, so the CPU mode cannot catch a raw conversion: this reads the kernel sources instead.
// It finds every cast to an integer type (C-style or static_cast) and flags it when its operand
// holds a float literal, a float math call (floor, sqrt, __float2int_rn, ...) or a name the same
// file declares as float / double / half / bfloat16. Without a compiler's types it cannot see a
// cast to a template parameter (`(T)v` with T = int32_t) or through `auto`; those stores are
// specialised by name (kernels/cpu/elementwise.cpp's store_d) so that the scan sees them.
std::string strip_comments_and_strings(const std::string& t) {
  std::string o = std::regex_replace(t, std::regex(R"(/\*[\s\S]*?\*/)"), " ");
  o = std::regex_replace(o, std::regex(R"(//[^\n]*)"), "");
  return std::regex_replace(o, std::regex(R"re("(?:[^"\\\n]|\\.)*")re"), "\"\"");
}

// The operand after a cast at i: a parenthesised expression, or a name / member / call / index chain.
std::string cast_operand(const std::string& t, size_t i) {
  auto balanced = [&](size_t j) {  // t[j] is '(' or '[': index past its match
    const char open = t[j], close = open == '(' ? ')' : ']';
    int depth = 0;
    for (; j < t.size(); ++j) {
      if (t[j] == open) ++depth;
      else if (t[j] == close && --depth == 0) return j + 1;
    }
    return t.size();
  };
  if (i < t.size() && t[i] == '(') {
    const size_t j = balanced(i);
    std::string paren = t.substr(i, j - i);
    size_t k = j;
    while (k < t.size() && std::isspace((unsigned char)t[k])) ++k;
    // `(int64_t)x` after a cast is itself a cast: the operand runs on to x.
    if (std::regex_match(paren, std::regex(R"(\(\s*[\w:\s]+\))")) && k < t.size() &&
        (std::isalnum((unsigned char)t[k]) || t[k] == '_' || t[k] == '('))
      paren += cast_operand(t, k);
    return paren;
  }
  std::smatch m;
  const std::string rest = t.substr(i, 400);
  if (!std::regex_search(rest, m, std::regex(R"(^[-+!~*&]*[\w.:]+(?:->[\w.:]+)*)"))) return "";
  size_t j = i + (size_t)m.length(0);
  while (j < t.size() && (t[j] == '(' || t[j] == '[')) {
    j = balanced(j);
    std::smatch m2;
    const std::string tail = t.substr(j, 100);
    if (std::regex_search(tail, m2, std::regex(R"(^(?:\.|->)\w+)"))) j += (size_t)m2.length(0);
  }
  return t.substr(i, j - i);
}

// "line: cast operand [why]" for each raw float -> integer conversion in `text`.
std::vector<std::string> raw_float_to_int_casts(const std::string& source) {
  const std::string t = strip_comments_and_strings(source);
  const std::string ints =
      R"((?:unsigned\s+long\s+long|long\s+long|unsigned\s+long|unsigned\s+int|unsigned|int|long|short|size_t|ptrdiff_t|u?int(?:8|16|32|64)_t))";
  const std::regex casts[2] = {std::regex(R"(\(\s*(?:const\s+)?)" + ints + R"(\s*\)\s*)"),
                               std::regex(R"(static_cast\s*<\s*(?:const\s+)?)" + ints + R"(\s*>\s*)")};
  const std::regex float_literal(R"((?:^|[^\w.])(?:\d+\.\d*|\.\d+)(?:[eE][-+]?\d+)?[fF]?(?![\w.])|(?:^|[^\w.])\d+[eE][-+]?\d+)");
  const std::regex float_call(
      R"(\b(?:std::)?(?:floor|ceil|round|trunc|rint|nearbyint|sqrt|rsqrt|exp|log|log2|pow|fabs|fmin|fmax|fma)f?\s*\(|__float2|__double2|__half2|__bfloat162)");
  const std::regex float_decl(R"(\b(?:float|double|half|bfloat16|__half|__nv_bfloat16)\s+(\w+)\s*(?=[=;,)\[]))");
  std::vector<std::string> float_names;
  for (std::sregex_iterator it(t.begin(), t.end(), float_decl), end; it != end; ++it) float_names.push_back((*it)[1]);
  std::vector<std::string> hits;
  for (const std::regex& cast : casts)
    for (std::sregex_iterator it(t.begin(), t.end(), cast), end; it != end; ++it) {
      const std::string op = cast_operand(t, (size_t)(it->position(0) + it->length(0)));
      std::string why;
      if (std::regex_search(op, float_literal)) why = "a float literal";
      else if (std::regex_search(op, float_call)) why = "a float function";
      else
        for (const std::string& n : float_names)
          if (std::regex_search(op, std::regex("\\b" + n + "\\b"))) {
            why = "'" + n + "', declared a float in this file";
            break;
          }
      if (why.empty()) continue;
      const auto line = std::count(t.begin(), t.begin() + it->position(0), '\n') + 1;
      hits.push_back(kiln::str_cat(line, ": ", it->str(), op, " [", why, "]"));
    }
  return hits;
}

}  // namespace

TEST_CASE("CPU mode sources: the scan for raw float to integer conversions finds each kind") {
  CHECK(raw_float_to_int_casts("int f(double v) { return (int32_t)v; }").size() == 1);
  CHECK(raw_float_to_int_casts("void f(float x, uint8_t* o) { *o = (uint8_t)(int64_t)x; }").size() == 2);
  CHECK(raw_float_to_int_casts("int64_t i = static_cast<int64_t>(floorf(a * b));").size() == 1);
  CHECK(raw_float_to_int_casts("int i = (int)(n * 0.5);").size() == 1);
  CHECK(raw_float_to_int_casts("const half h = x[i]; int k = (int)(h);").size() == 1);
  // Integer -> integer and float -> float casts, comments and strings pass.
  CHECK(raw_float_to_int_casts("int64_t n; int k = (int)n; unsigned u = (unsigned)(k + 1); float f = (float)k;").empty());
  CHECK(raw_float_to_int_casts("// (int)1.5 here is a comment\nconst char* s = \"(int)2.5\";").empty());
  CHECK(raw_float_to_int_casts("float v; int32_t r = kiln::float_to_int<int32_t>(v);").empty());
}

TEST_CASE("CPU mode sources: no raw float to integer conversion in kernel sources outside float_to_int") {
  // kernels/common/float_to_int.h is the one place (its rule: truncate, saturate, NaN -> 0).
  int files = 0;
  for (const char* dir : {"kernels/cuda", "kernels/cpu", "kernels/common"})
    for (const auto& e : fs::directory_iterator(fs::path(KILN_SOURCE_DIR) / dir)) {
      const std::string ext = e.path().extension().string(), name = e.path().filename().string();
      if (ext != ".cu" && ext != ".cuh" && ext != ".h" && ext != ".cpp" && ext != ".inc") continue;
      if (name == "float_to_int.h") continue;
      ++files;
      for (const std::string& hit : raw_float_to_int_casts(read_text(e.path())))
        FAIL_CHECK(kiln::str_cat(dir, "/", name, ":", hit, ": convert through kiln::float_to_int"));
    }
  CHECK(files > 50);
}

namespace {

__global__ void KILN_KERNEL_BOUNDS(32) oob_kernel(float* out) {
  KILN_SHARED(float, s, 32);
  s[threadIdx.x + 1] = 1.f;  // thread 31 writes s[32]: one past the end
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}

const bool registered_oob = kiln::cuda_on_cpu::register_kernel_bounds("oob_kernel", 32);

}  // namespace

TEST_CASE("CPU mode mutation: an out-of-bounds shared-memory write is caught by AddressSanitizer") {
  REQUIRE(registered_oob);
#if defined(KILN_TEST_ASAN)
  // In a child process: ASan ends it, and its report names the overflow.
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    std::vector<float> out(32);
    kiln::cuda_on_cpu::launch_kernel("oob_kernel", oob_kernel, 1, 32, 0, nullptr, out.data());
    _exit(0);
  }
  close(fds[1]);
  std::string report;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) report.append(buf, (size_t)n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CHECK(report.find("heap-buffer-overflow") != std::string::npos);
  CHECK(report.find("oob_kernel") != std::string::npos);
#else
  (void)oob_kernel;
  MESSAGE("out-of-bounds check skipped: not an AddressSanitizer build (scripts/test.sh runs it in build-asan)");
#endif
}
