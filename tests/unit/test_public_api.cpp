// The public surface: engine/api/*.h (installed as <kiln/*.h>) and every header they include, transitively,
// hold no kernels/ or tools/ header; every public header opens with an "Intended usage" comment; and every
// example includes kiln only as <kiln/...>. (The installed tree is checked against the same closure by
// `slow:install and examples`.)
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  REQUIRE_MESSAGE(in.good(), "cannot read ", p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Quoted includes, resolved next to the includer first, then from the root (as the compiler does).
std::set<std::string> include_closure(const fs::path& root, std::vector<std::string> todo) {
  const std::regex inc(R"re(^\s*#\s*include\s*"([^"]+)")re");
  std::set<std::string> seen;
  while (!todo.empty()) {
    const std::string f = todo.back();
    todo.pop_back();
    if (!seen.insert(f).second) continue;
    std::istringstream in(read_text(root / f));
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (!std::regex_search(line, m, inc)) continue;
      const fs::path next = (fs::path(f).parent_path() / m[1].str()).lexically_normal();
      if (fs::exists(root / next)) todo.push_back(next.string());
      else if (fs::exists(root / m[1].str())) todo.push_back(m[1].str());
      else FAIL_CHECK(f, " includes \"", m[1].str(), "\", which resolves to no file of the tree");
    }
  }
  return seen;
}

std::vector<std::string> public_headers(const fs::path& root) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(root / "engine/api"))
    if (e.path().extension() == ".h") v.push_back(fs::relative(e.path(), root).string());
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST_CASE("public headers: the include closure of <kiln/*.h> holds no kernels/ or tools/ header") {
  const fs::path root = KILN_SOURCE_DIR;
  const std::vector<std::string> api = public_headers(root);
  REQUIRE(api.size() >= 10);  // kiln, version, tensor, nn, optim, io, data, models, train, memory, run
  const std::set<std::string> closure = include_closure(root, api);
  MESSAGE("public headers: ", api.size(), ", their include closure: ", closure.size(), " headers");
  CHECK(closure.size() > api.size() + 20);  // the closure was really followed
  for (const std::string& h : closure) {
    CHECK_MESSAGE(h.rfind("kernels/", 0) != 0, h, " (a kernel header) is reachable from the public headers");
    CHECK_MESSAGE(h.rfind("tools/", 0) != 0, h, " (the command's header) is reachable from the public headers");
  }
  for (const std::string& h : api) {
    const std::string text = read_text(root / h);
    CHECK_MESSAGE(text.find("Intended usage") < text.find("#pragma once"), h, ": no \"Intended usage\" comment");
  }
}

TEST_CASE("public headers: the examples include kiln only as <kiln/...>") {
  const fs::path root = KILN_SOURCE_DIR;
  const std::regex quoted(R"re(^\s*#\s*include\s*")re"), kiln_angle(R"(^\s*#\s*include\s*<kiln/([a-z_]+\.h)>)"),
      internal(R"(^\s*#\s*include\s*<(engine|data|models|kernels|tools)/)");
  std::set<std::string> api;
  for (const std::string& h : public_headers(root)) api.insert(fs::path(h).filename().string());
  int examples = 0;
  for (const auto& e : fs::directory_iterator(root / "examples")) {
    if (e.path().extension() != ".cpp") continue;
    ++examples;
    std::istringstream in(read_text(e.path()));
    int n = 0;
    for (std::string line; std::getline(in, line);) {
      ++n;
      std::smatch m;
      CHECK_MESSAGE(!std::regex_search(line, quoted), e.path().filename().string(), ":", n, ": ", line);
      CHECK_MESSAGE(!std::regex_search(line, internal), e.path().filename().string(), ":", n, ": ", line);
      if (std::regex_search(line, m, kiln_angle))
        CHECK_MESSAGE(api.count(m[1].str()) == 1, e.path().filename().string(), ":", n, ": <kiln/", m[1].str(),
                      "> is no public header");
    }
  }
  CHECK(examples >= 4);
}
