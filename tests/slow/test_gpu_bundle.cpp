// The bundle of tools/gpu-check --bundle (scripts/gpu_bundle.sh) is all a bare GPU machine needs besides
// CUDA and CMake: kiln's own CMakeLists is configured here with the system prefixes hidden
// (CMAKE_IGNORE_PREFIX_PATH=/usr;/usr/local, PKG_CONFIG_LIBDIR at the bundle) against a bundle that was moved
// after it was made, and one small target (kiln_deps_probe: one call into each library) is built and run.
// Every dependency must come from the moved bundle (CMake's cache, the compiler's include trace, ldd), and the
// same configure against an empty folder must fail, which shows that the hiding hides.
// The bundle is made once per build folder (remade when scripts/gpu_bundle.sh changes); about a minute.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "support/shell.h"

namespace {

using Run = kiln_test::ShellRun;
using kiln_test::read_text;
using kiln_test::run_shell;

// The value of NAME in a CMakeCache.txt ("NAME:TYPE=value"), or "" when absent.
std::string cache_value(const std::string& cache, const std::string& name) {
  std::smatch m;
  if (std::regex_search(cache, m, std::regex("(^|\n)" + name + ":[A-Z]+=([^\n]*)"))) return m[2];
  return "";
}

// The first header in a -H trace whose path ends with TAIL but lies outside PREFIX ("" when none).
std::string opened_elsewhere(const std::string& trace, const std::string& tail, const std::string& prefix) {
  std::istringstream in(trace);
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find_first_not_of(". ");
    if (a == std::string::npos || a == 0) continue;  // -H lines start with dots
    const std::string path = line.substr(a);
    if (path.size() >= tail.size() && path.compare(path.size() - tail.size(), tail.size(), tail) == 0 &&
        path.rfind(prefix, 0) != 0)
      return path;
  }
  return "";
}

const std::string kSrc = KILN_SOURCE_DIR;
const std::string kDir = std::string(KILN_BINARY_DIR) + "/gpu-bundle-test";

// cmake configure of kiln against PREFIX alone (KILN_CUDA=OFF: this is about the Debian dependencies).
std::string hidden_configure(const std::string& prefix, const std::string& build) {
  return "rm -rf '" + build + "' && env -u PKG_CONFIG_PATH PKG_CONFIG_LIBDIR='" + prefix +
         "/lib/pkgconfig' cmake -S '" + kSrc + "' -B '" + build + "' " +
         (prefix.find("empty") == std::string::npos ? "-C '" + prefix + "/kiln-bundle.cmake' " : "-DCMAKE_PREFIX_PATH='" + prefix + "' ") +
         "-DKILN_CUDA=OFF -DKILN_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-H '-DCMAKE_IGNORE_PREFIX_PATH=/usr;/usr/local'";
}

}  // namespace

TEST_CASE("gpu bundle: kiln configures, builds and runs a probe of every dependency from a moved bundle alone") {
  const std::string made = kDir + "/made/kiln-bundle", moved = kDir + "/moved/kiln-bundle";
  const Run mk = run_shell("if [ ! -f '" + made + "/MANIFEST' ] || [ '" + kSrc + "/scripts/gpu_bundle.sh' -nt '" + made +
                           "/MANIFEST' ]; then bash '" + kSrc + "/scripts/gpu_bundle.sh' --no-tar '" + made +
                           "'; fi && rm -rf '" + kDir + "/moved' && mkdir -p '" + kDir + "/moved' && cp -a '" + made +
                           "' '" + moved + "'");
  REQUIRE_MESSAGE(mk.status == 0, mk.out);

  const std::string build = kDir + "/build";
  const Run cfg = run_shell(hidden_configure(moved, build));
  INFO(cfg.out);
  REQUIRE(cfg.status == 0);
  const std::string cache = read_text(build + "/CMakeCache.txt");
  for (const char* var : {"PKG_CONFIG_EXECUTABLE", "pkgcfg_lib_OPENBLAS_openblas", "pkgcfg_lib_TURBOJPEG_turbojpeg",
                          "pkgcfg_lib_LIBJPEG_jpeg", "ZLIB_INCLUDE_DIR", "PNG_PNG_INCLUDE_DIR", "PNG_LIBRARY_RELEASE",
                          "STB_INCLUDE_DIR", "CLI11_DIR",
                          "nlohmann_json_DIR", "doctest_DIR"}) {
    INFO(var << " = " << cache_value(cache, var));
    CHECK(cache_value(cache, var).rfind(moved, 0) == 0);
  }
  CHECK(cache.find(made) == std::string::npos);  // nothing points back to where the bundle was made

  // Configured with -H: the compiler names every header it opens; each dependency's must be the bundle's.
  const Run b = run_shell("cmake --build '" + build + "' --target kiln_deps_probe");
  INFO(b.out);
  CHECK(b.status == 0);
  for (const char* h : {"turbojpeg.h", "jpeglib.h", "jconfig.h", "zlib.h", "zconf.h", "png.h", "cblas.h",
                        "openblas_config.h", "doctest/doctest.h", "CLI/CLI.hpp", "nlohmann/json.hpp",
                        "stb/stb_image.h"}) {
    INFO(h);
    CHECK(b.out.find(moved + "/include/" + h) != std::string::npos);
    CHECK(opened_elsewhere(b.out, std::string("/") + h, moved) == "");
  }
  const std::string probe = build + "/kiln_deps_probe";
  const Run ldd = run_shell("env -u LD_LIBRARY_PATH LD_LIBRARY_PATH='" + moved + "/lib' ldd '" + probe + "'");
  INFO(ldd.out);
  REQUIRE(ldd.status == 0);
  for (const char* lib : {"libopenblas.so.0", "libturbojpeg.so.0", "libjpeg.so.62", "libpng16.so.16", "libgfortran.so.5",
                          "libquadmath.so.0"}) {
    INFO(lib);
    CHECK(ldd.out.find(std::string(lib) + " => " + moved + "/lib/" + lib) != std::string::npos);
  }
  const Run p = run_shell("env LD_LIBRARY_PATH='" + moved + "/lib' '" + probe + "'");
  CHECK(p.status == 0);
  CHECK(p.out.find("all dependencies answered") != std::string::npos);
}

TEST_CASE("gpu bundle: the same hidden configure against an empty folder fails at a dependency") {
  const std::string empty = kDir + "/empty";
  const Run mk = run_shell("rm -rf '" + empty + "' && mkdir -p '" + empty + "/lib/pkgconfig'");
  REQUIRE(mk.status == 0);
  const Run cfg = run_shell(hidden_configure(empty, kDir + "/build-empty"));
  INFO(cfg.out);
  CHECK(cfg.status != 0);
  const bool named = cfg.out.find("openblas") != std::string::npos || cfg.out.find("PkgConfig") != std::string::npos ||
                     cfg.out.find("pkg-config") != std::string::npos;
  CHECK(named);
}
