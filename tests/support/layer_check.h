// The include-layer checker behind the `layers` test: reads the layer order (the ```layers block of
// docs/architecture.md, lowest first; folders on one line are one layer), scans every
// `#include "..."` of the source folders under a root, and lists the edges that go up the order,
// the source files in no listed folder, and how many includes it resolved. Test code only: it
// must not be linked into libkiln.
#pragma once
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln_test {

struct LayerOrder {
  std::vector<std::pair<std::string, int>> folders;  // folder -> rank (0 = lowest)
};

// The ```layers block of `doc_text`; throws when there is none or a folder is listed twice.
inline LayerOrder parse_layer_order(const std::string& doc_text) {
  std::istringstream in(doc_text);
  std::string line;
  bool inside = false, found = false;
  LayerOrder o;
  int rank = 0;
  while (std::getline(in, line)) {
    if (!inside && line.rfind("```layers", 0) == 0) {
      inside = found = true;
      continue;
    }
    if (inside && line.rfind("```", 0) == 0) break;
    if (!inside) continue;
    std::istringstream words(line);
    std::string w;
    bool any = false;
    while (words >> w) {
      if (w[0] == '#') break;
      while (!w.empty() && w.back() == '/') w.pop_back();
      for (auto& [f, r] : o.folders)
        if (f == w) throw std::runtime_error("layer order: folder " + w + " listed twice");
      o.folders.emplace_back(w, rank);
      any = true;
    }
    if (any) ++rank;
  }
  if (!found || o.folders.empty()) throw std::runtime_error("layer order: no ```layers block");
  return o;
}

// The rank of the longest listed folder that holds `rel` (a path relative to the root); -1: none.
inline int layer_of(const LayerOrder& o, const std::string& rel, std::string* folder = nullptr) {
  int best = -1;
  size_t best_len = 0;
  for (const auto& [f, r] : o.folders)
    if (rel.size() > f.size() && rel.compare(0, f.size(), f) == 0 && rel[f.size()] == '/' && f.size() > best_len) {
      best = r, best_len = f.size();
      if (folder) *folder = f;
    }
  return best;
}

struct LayerReport {
  std::vector<std::string> upward;    // "a.cpp:12 includes b.h (engine/ops above engine/core)"
  std::vector<std::string> unplaced;  // source files in no listed folder
  int64_t edges = 0;                  // includes resolved to a file in a listed folder
};

// Scans the source files (.h .hpp .cpp .cu .cuh) under root/<top> for every top-level folder named in
// the order. An include is resolved against the root, then the including file's folder, then
// root/tests (the test suites' include folder); unresolved ones (system-like) are skipped.
inline LayerReport check_layers(const std::filesystem::path& root, const LayerOrder& o) {
  namespace fs = std::filesystem;
  std::vector<std::string> tops;
  for (const auto& [f, r] : o.folders) {
    const std::string top = f.substr(0, f.find('/'));
    if (std::find(tops.begin(), tops.end(), top) == tops.end()) tops.push_back(top);
  }
  static const std::regex inc_re(R"re(^\s*#\s*include\s*"([^"]+)")re");
  LayerReport rep;
  std::vector<std::string> files;
  for (const std::string& top : tops) {
    if (!fs::is_directory(root / top)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root / top)) {
      if (!e.is_regular_file()) continue;
      const std::string ext = e.path().extension().string();
      if (ext != ".h" && ext != ".hpp" && ext != ".cpp" && ext != ".cu" && ext != ".cuh") continue;
      files.push_back(fs::relative(e.path(), root).generic_string());
    }
  }
  std::sort(files.begin(), files.end());
  for (const std::string& rel : files) {
    std::string from_folder;
    const int from = layer_of(o, rel, &from_folder);
    if (from < 0) {
      rep.unplaced.push_back(rel);
      continue;
    }
    std::ifstream in(root / rel);
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      std::smatch m;
      if (!std::regex_search(line, m, inc_re)) continue;
      const std::string inc = m[1].str();
      std::string target;
      for (const fs::path& base : {root, (root / rel).parent_path(), root / "tests"}) {
        std::error_code ec;
        const fs::path p = fs::weakly_canonical(base / inc, ec);
        if (!ec && fs::is_regular_file(p)) {
          target = fs::relative(p, fs::weakly_canonical(root)).generic_string();
          break;
        }
      }
      if (target.empty()) continue;
      std::string to_folder;
      const int to = layer_of(o, target, &to_folder);
      if (to < 0) continue;  // a file outside the listed folders (it is reported as unplaced if it is a source)
      ++rep.edges;
      if (to > from)
        rep.upward.push_back(rel + ":" + std::to_string(lineno) + " includes " + target + " (" + to_folder +
                             " is above " + from_folder + ")");
    }
  }
  return rep;
}

}  // namespace kiln_test
