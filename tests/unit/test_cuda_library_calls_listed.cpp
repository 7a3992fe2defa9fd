// docs/gpu-status.md lists every cuBLAS, cuDNN and NCCL call site (issue 33: those libraries cannot run
// without a GPU, so the list says exactly what is untested). Reads kernels/cuda and bench sources for calls
// `cublasX(`, `cudnnX(`, `ncclX(` and checks that each is named in that file's entry of the table
// ("path: `call`, `call`; ...", a path may have one entry per library), so a new call cannot slip in unlisted. Types (`..._t`) are not calls.
#include <doctest/doctest.h>

#include <filesystem>
#include <regex>
#include <set>
#include <string>

#include "support/shell.h"

namespace fs = std::filesystem;
using kiln_test::read_text;

TEST_CASE("library calls: every cuBLAS / cuDNN / NCCL call is listed in docs/gpu-status.md") {
  const fs::path src = KILN_SOURCE_DIR;
  const std::string page = read_text((src / "docs/gpu-status.md").string());
  const size_t table = page.find("| library | call sites |");
  REQUIRE(table != std::string::npos);
  const std::string doc = page.substr(table, page.find("\n\n", table) - table);  // the table only
  const std::regex call(R"(\b((?:cublas|cudnn|nccl)[A-Z]\w*)\s*\()");
  int files = 0, calls = 0;
  for (const char* dir : {"kernels/cuda", "bench"}) {
    for (const auto& e : fs::directory_iterator(src / dir)) {
      const std::string ext = e.path().extension().string();
      if (ext != ".cpp" && ext != ".cu" && ext != ".h" && ext != ".cuh") continue;
      const std::string text = read_text(e.path().string());
      std::set<std::string> names;
      for (std::sregex_iterator it(text.begin(), text.end(), call), end; it != end; ++it) {
        const std::string n = (*it)[1].str();
        if (n.size() > 2 && n.compare(n.size() - 2, 2, "_t") == 0) continue;  // a cast to a type
        names.insert(n);
      }
      if (names.empty()) continue;
      ++files;
      const std::string rel = std::string(dir) + "/" + e.path().filename().string();
      // Its entries (one per library row: runtime.cpp holds both handles), "path: `a`, `b`" up to ';' or '|'.
      std::string entry;
      for (size_t at = doc.find(rel + ": "); at != std::string::npos; at = doc.find(rel + ": ", at + 1))
        entry += doc.substr(at, doc.find_first_of(";|", at) - at);
      INFO(rel);
      REQUIRE_MESSAGE(!entry.empty(), rel, " calls a library but has no entry in docs/gpu-status.md's table");
      for (const std::string& n : names) {
        ++calls;
        CHECK_MESSAGE(entry.find("`" + n + "`") != std::string::npos, rel, " calls ", n,
                      ", which its entry in docs/gpu-status.md does not list");
      }
    }
  }
  CHECK(files >= 6);  // matmul, conv2d, runtime, nccl_comm, the two benchmarks
  CHECK(calls >= 60);
}
