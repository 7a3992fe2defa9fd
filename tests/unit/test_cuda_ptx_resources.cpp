// Resource usage of kiln's Tensor Core kernels from the compiler, with no GPU: nvcc --resource-usage
// (ptxas) compiles kernels/cuda/hgemm.cu and igemm_conv.cu for sm_80 and sm_90 (a fatbin; nothing runs)
// and every entry function must have: no local-memory spill stores or loads, registers x its
// __launch_bounds__ threads (Tile::THREADS = 256; splitk_reduce 256) within the 64 K registers of an
// SM, a stack frame of 0 bytes, and a build for both architectures. Skips with a visible line when
// nvcc is not installed. (~25 s CPU; the sanitizer run leaves the "cuda ptx" tests out.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

std::string nvcc_path() {
  std::vector<std::string> cands;
  for (const char* env : {"KILN_NVCC", "CUDACXX"})
    if (const char* v = std::getenv(env); v && *v) cands.push_back(v);
  cands.push_back("/usr/local/cuda/bin/nvcc");
  cands.push_back("nvcc");
  for (const auto& c : cands)
    if (std::system(("'" + c + "' --version > /dev/null 2>&1").c_str()) == 0) return c;
  return "";
}

struct Usage {
  int regs = -1, stack = -1, spill_st = -1, spill_ld = -1;
};

}  // namespace

TEST_CASE("cuda ptx resources: the Tensor Core kernels spill nothing and fit their launch bounds on sm_80 and sm_90") {
  const std::string nvcc = nvcc_path();
  if (nvcc.empty()) {
    MESSAGE("cuda ptx resources test skipped: nvcc not found (set KILN_NVCC or CUDACXX, or install the CUDA toolkit)");
    return;
  }
  const fs::path src = KILN_SOURCE_DIR, dir = fs::path(KILN_BINARY_DIR) / "ptx_check";
  fs::create_directories(dir);
  const std::regex entry(R"(Compiling entry function '(\w+)' for '(sm_\d+)')");
  const std::regex frame(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  const std::regex regs(R"(Used (\d+) registers)");
  int kernels = 0;
  for (const char* file : {"hgemm", "igemm_conv"}) {
    const fs::path log = dir / (std::string(file) + ".resources.log"), out = dir / (std::string(file) + ".fatbin");
    const std::string cmd = "'" + nvcc + "' -fatbin -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 " +
                            "-std=c++17 --expt-relaxed-constexpr --resource-usage -I'" + src.string() + "' '" +
                            (src / "kernels/cuda" / (std::string(file) + ".cu")).string() + "' -o '" + out.string() +
                            "' > '" + log.string() + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream lf(log);
    std::stringstream ss;
    ss << lf.rdbuf();
    const std::string text = ss.str();
    INFO("nvcc command: " << cmd);
    REQUIRE_MESSAGE(rc == 0, text);
    // ptxas prints, per entry: "Compiling entry function 'X' for 'sm_NN'", then its frame and register lines.
    std::map<std::string, std::map<std::string, Usage>> use;  // kernel -> arch -> usage
    std::string cur, arch;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      std::smatch m;
      if (std::regex_search(line, m, entry)) {
        cur = m[1];
        arch = m[2];
        use[cur][arch] = Usage{};
      } else if (!cur.empty() && std::regex_search(line, m, frame)) {
        Usage& u = use[cur][arch];
        u.stack = std::stoi(m[1]), u.spill_st = std::stoi(m[2]), u.spill_ld = std::stoi(m[3]);
      } else if (!cur.empty() && std::regex_search(line, m, regs)) {
        use[cur][arch].regs = std::stoi(m[1]);
      }
    }
    int most = 0;
    for (const auto& kv : use) {  // not a structured binding: clang cannot capture one in CAPTURE's lambda
      const std::string& k = kv.first;
      const auto& archs = kv.second;
      ++kernels;
      for (const auto& au : archs) most = std::max(most, au.second.regs);
      CAPTURE(k);
      CHECK(archs.count("sm_80") == 1);
      CHECK(archs.count("sm_90") == 1);
      for (const auto& au : archs) {
        const std::string& a = au.first;
        const Usage& u = au.second;
        CAPTURE(a);
        CHECK(u.regs > 0);
        CHECK(u.regs * 256 <= 65536);  // every kernel here states KILN_KERNEL_BOUNDS(256)
        CHECK(u.spill_st == 0);
        CHECK(u.spill_ld == 0);
        CHECK(u.stack == 0);
      }
    }
    MESSAGE(std::string(file), ".cu: ", use.size(), " kernels, at most ", most, " registers, no spills");
  }
  CHECK(kernels >= 8);
}
