// bench_decode: decode + Resize(256 shorter side) + CenterCrop(224) + ImageNet normalize to f32
// CHW, over the JPEG wallpapers in /usr/share/wallpapers (or a folder given as ROOT or --root), at 1 and
// 2 threads: kiln (fused, DCT-scaled decode; progressive files through kiln's own decoder), the same
// with TurboJPEG for every file, kiln at full-scale decode, PIL + torchvision
// (plain and with draft mode) and OpenCV (cv2.imdecode + cv2.resize INTER_AREA), all in one run.
// Peers are bench/peers/decode_*.py run with /usr/bin/python3. Prints one table.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "data/decode.h"
#include "data/jpeg_progressive.h"
#include "data/sample_pipeline.h"

#include "bench/bench_cli.h"
#include "bench/peer_path.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

double run_kiln(const std::vector<std::string>& files, int threads, bool dct, bool own_progressive = true) {
  SampleTransform t;
  t.decode.fast_paths = own_progressive;
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
  for (int c = 0; c < 3; ++c) t.mean[c] = mean[c], t.std[c] = stdv[c];
  t.dct_scaling = dct;
  std::vector<std::vector<float>> out(threads, std::vector<float>(t.sample_elems()));
  load_sample_file(files[0], t, 0, 0, out[0].data());  // warm-up
  auto t0 = std::chrono::steady_clock::now();
  // Dynamic distribution (the next file goes to whichever thread is free), like the peers' pools:
  // the files differ 5x in decode time, so a static split leaves one thread idle at the end.
  std::atomic<size_t> next{0};
  std::vector<std::thread> th;
  for (int k = 0; k < threads; ++k)
    th.emplace_back([&, k] {
      for (size_t i = next++; i < files.size(); i = next++) load_sample_file(files[i], t, 0, 0, out[(size_t)k].data());
    });
  for (auto& x : th) x.join();
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return files.size() / dt;
}

// Runs a peer script; returns images/s, or -1 with `note` set to what it printed instead.
double run_peer(const std::string& script, const std::string& list, int threads, const std::string& extra,
                std::string* note) {
  std::string cmd = "/usr/bin/python3 " + script + " " + list + " " + std::to_string(threads) + " " + extra + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char line[512];
  double v = -1;
  std::string all;
  while (std::fgets(line, sizeof line, p)) {
    all += line;
    double x;
    if (std::sscanf(line, "images_per_s %lf", &x) == 1) v = x;
  }
  pclose(p);
  if (v < 0) {
    size_t e = all.find_last_not_of("\n");
    size_t s = all.rfind('\n', e == std::string::npos ? 0 : e);
    *note = all.empty() ? "no output" : all.substr(s == std::string::npos ? 0 : s + 1, e == std::string::npos ? 0 : e - s);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_decode: decode + Resize(256) + CenterCrop(224) + ImageNet normalize of JPEGs at 1 and 2 "
               "threads, kiln against PIL + torchvision and OpenCV in the same run"};
  app.name("bench_decode");
  std::string root = "/usr/share/wallpapers", peers_arg;
  size_t limit = 0;
  int reps = 3;
  app.add_option("root,--root", root, "folder of JPEG files (any depth)")->capture_default_str();
  app.add_option("--peers", peers_arg, "folder of the peer scripts (default: bench/peers beside the source)");
  app.add_option("--limit", limit, "the first N files (sorted; 0: all)");
  app.add_option("--reps", reps, "rounds, the best rate kept")->check(CLI::PositiveNumber)->capture_default_str();
  return kiln_bench::run(app, argc, argv, [&]() -> int {
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::string ext = it->path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
    if (it->is_regular_file() && (ext == ".jpg" || ext == ".jpeg")) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  if (limit && files.size() > limit) files.resize(limit);
  if (files.empty()) {
    std::printf("bench_decode: no JPEG files under %s\n", root.c_str());
    return 1;
  }
  // Warm the page cache so every contender reads from memory.
  uint64_t bytes = 0;
  for (auto& f : files) bytes += fs::file_size(f, ec);
  for (auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::vector<char> b((size_t)fs::file_size(f, ec));
    in.read(b.data(), (std::streamsize)b.size());
  }
  // kiln's own progressive decoder against TurboJPEG on every progressive file, at the scale the
  // timed pipeline uses (the shorter side >= 256): same bytes, or it handed the file back.
  std::string progressive_check;
  {
    int prog = 0, own = 0, same = 0;
    for (auto& f : files) {
      std::string b = read_file_bytes(f, 1ull << 30);
      const auto* d = reinterpret_cast<const uint8_t*>(b.data());
      int W = 0, H = 0;
      if (!jpeg_is_progressive(d, b.size()) || !jpeg_probe_size(d, b.size(), false, &W, &H)) continue;
      ++prog;
      const int s = std::min(W, H);
      const int denom = jpeg_scale_denom(W, H, s >= 256 ? (int)((int64_t)W * 256 / s) : 0, s >= 256 ? 256 : 0);
      Image k;
      if (!decode_jpeg_progressive_scaled(d, b.size(), denom, 3, &k)) continue;
      ++own;
      DecodeOptions o;
      o.fast_paths = false;
      o.apply_exif = false;
      o.min_w = k.w;
      o.min_h = k.h;
      Image t = decode_image_bytes(d, b.size(), f, o);
      same += t.w == k.w && t.h == k.h && t.px == k.px;
    }
    progressive_check = std::to_string(prog) + " progressive files, " + std::to_string(own) + " decoded by kiln (" +
                        std::to_string(prog - own) + " handed to TurboJPEG: decoded at full scale or 1/2), " +
                        std::to_string(same) + " of them byte-identical to TurboJPEG";
  }
  std::string list = (fs::temp_directory_path() / ("kiln_bench_decode_" + std::to_string(getpid()) + ".txt")).string();
  {
    std::ofstream o(list);
    for (auto& f : files) o << f << "\n";
  }
  // Peers live next to this source file (bench/peer_path.h); KILN_BENCH_PEERS or --peers override.
#ifdef KILN_BENCH_PEERS
  std::string peers = KILN_BENCH_PEERS;
#else
  std::string peers = kiln_bench::peers_dir(__FILE__);
#endif
  if (!peers_arg.empty()) peers = peers_arg;
  std::printf("bench_decode: %zu JPEGs (%.1f MB) under %s; Resize(256) + CenterCrop(224) + Normalize -> f32 CHW; "
              "best of %d rounds\n",
              files.size(), bytes / 1e6, root.c_str(), reps);
  // Every contender runs `reps` rounds, interleaved (a slow minute of a shared machine falls on
  // all of them), and keeps its best rate: the rate the code can do, not the noise.
  struct Row {
    std::string name;
    std::function<double(int)> run;  // threads -> images/s (< 0: did not run)
    double ips[2];
    std::string note;
  };
  std::vector<Row> rows;
  rows.push_back({"kiln (DCT-scaled decode, fused)", [&](int t) { return run_kiln(files, t, true); }, {0, 0}, ""});
  rows.push_back({"kiln, TurboJPEG for every file", [&](int t) { return run_kiln(files, t, true, false); }, {0, 0}, ""});
  rows.push_back({"kiln (full-scale decode, fused)", [&](int t) { return run_kiln(files, t, false); }, {0, 0}, ""});
  rows.push_back({"PIL + torchvision", {}, {0, 0}, ""});
  rows.push_back({"PIL + torchvision (draft)", {}, {0, 0}, ""});
  rows.push_back({"OpenCV imdecode + resize(AREA)", {}, {0, 0}, ""});
  rows[3].run = [&](int t) { return run_peer(peers + "/decode_pil.py", list, t, "", &rows[3].note); };
  rows[4].run = [&](int t) { return run_peer(peers + "/decode_pil.py", list, t, "draft", &rows[4].note); };
  rows[5].run = [&](int t) { return run_peer(peers + "/decode_cv2.py", list, t, "", &rows[5].note); };
  for (int r = 0; r < reps; ++r) {
    std::fprintf(stderr, "bench_decode: round %d of %d\n", r + 1, reps);
    for (auto& row : rows)
      for (int t = 1; t <= 2; ++t) {
        const double v = row.run(t);
        double& best = row.ips[t - 1];
        if (r == 0) best = v;
        else if (v < 0 || best < 0) best = -1;  // a contender that failed once is reported as failed
        else best = std::max(best, v);
      }
  }
  fs::remove(list, ec);

  const double pil1 = rows[3].ips[0];
  std::printf("\n%-34s %12s %12s %9s %12s\n", "pipeline", "1 thr img/s", "2 thr img/s", "scaling", "vs PIL (1t)");
  for (auto& r : rows) {
    if (r.ips[0] < 0 || r.ips[1] < 0) {
      std::printf("%-34s %s\n", r.name.c_str(), r.note.c_str());
      continue;
    }
    std::printf("%-34s %12.1f %12.1f %8.2fx %11.2fx\n", r.name.c_str(), r.ips[0], r.ips[1], r.ips[1] / r.ips[0],
                pil1 > 0 ? r.ips[0] / pil1 : 0.0);
  }
  if (rows[5].ips[0] > 0)
    std::printf("\nkiln (DCT) vs OpenCV: %.2fx at 1 thread, %.2fx at 2 threads\n", rows[0].ips[0] / rows[5].ips[0],
                rows[0].ips[1] / rows[5].ips[1]);
  std::printf("kiln's progressive decoder: %s\n", progressive_check.c_str());
  std::printf("goals: kiln >= 4x PIL+torchvision per thread, ahead of OpenCV, >= 1.8x from 1 to 2 threads\n");
  return 0;
  });
}
