// Fashion-MNIST -> segmentation folder (see export_segmentation.h). Random choices come from a
// splitmix64 stream per (seed, split, sample), so a sample does not depend on the others.
#include "data/export_segmentation.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/png_io.h"
#include "engine/io/atomic_file.h"
#include "engine/io/idx.h"

namespace kiln {
namespace fs = std::filesystem;

namespace {

const char* kMarker = ".kiln_export";
const char* const kClasses[] = {"background", "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                "Sandal",     "Shirt",       "Sneaker", "Bag",      "Ankle boot", nullptr};
const char* const kShapeClasses[] = {"background", "top", "trouser", "footwear", "bag", nullptr};
// Fashion-MNIST label -> shape group (0-based): T-shirt/top, Trouser, Pullover, Dress, Coat, Sandal, Shirt,
// Sneaker, Bag, Ankle boot.
constexpr int kShapeOf[10] = {0, 1, 0, 0, 0, 2, 0, 2, 3, 2};
constexpr int kShapeGroups = 4;

struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  int64_t below(int64_t n) { return (int64_t)(next() % (uint64_t)n); }
};

struct Items {  // u8 28x28 images and their labels
  HostArray images, labels;
  int64_t n = 0;
  std::vector<int64_t> of_shape[kShapeGroups];  // the items of each shape group, in index order
};

Items load_items(const std::string& images, const std::string& labels, const std::string& folder) {
  KILN_CHECK(!images.empty() && !labels.empty(), "export-images --segmentation: ", folder,
             " lacks the Fashion-MNIST IDX files (apt install dataset-fashion-mnist, or --data FOLDER)");
  Items it;
  it.images = read_idx(images);
  it.labels = read_idx(labels);
  KILN_CHECK(it.images.dtype == DType::u8 && it.images.shape.size() == 3 && it.images.shape[1] == 28 &&
                 it.images.shape[2] == 28,
             "export-images --segmentation: ", images, ": expected u8 images of 28x28, got shape ",
             shape_str(it.images.shape));
  KILN_CHECK(it.labels.dtype == DType::u8 && it.labels.shape.size() == 1 && it.labels.shape[0] == it.images.shape[0],
             "export-images --segmentation: ", labels, ": expected one u8 label per image");
  it.n = it.images.shape[0];
  KILN_CHECK(it.n > 0, "export-images --segmentation: ", images, " holds no images");
  for (int64_t i = 0; i < it.n; ++i) {
    KILN_CHECK(it.labels.data<uint8_t>()[i] < 10, "export-images --segmentation: ", labels, ": label ",
               (int)it.labels.data<uint8_t>()[i], " at ", i, " (Fashion-MNIST has 10)");
    it.of_shape[kShapeOf[it.labels.data<uint8_t>()[i]]].push_back(i);
  }
  return it;
}

// One sample: canvas image and mask (both canvas x canvas, 1 channel).
void make_sample(const Items& items, const ExportSegmentationOptions& o, uint64_t key, Image* img, Image* mask) {
  SplitMix r{key};
  const int S = o.canvas;
  img->w = mask->w = S;
  img->h = mask->h = S;
  img->c = mask->c = 1;
  img->px.resize((size_t)S * S);
  mask->px.assign((size_t)S * S, 0);
  for (uint8_t& p : img->px) p = (uint8_t)(r.next() & 15);  // background noise 0..15
  const int k = o.min_items + (int)r.below(o.max_items - o.min_items + 1);
  const bool shapes = o.classes == "shapes";
  for (int j = 0; j < k; ++j) {
    int64_t i;
    if (shapes) {  // a group first, uniformly, then one of its items
      const std::vector<int64_t>& g = items.of_shape[r.below(kShapeGroups)];
      KILN_CHECK(!g.empty(), "export-images --segmentation --classes shapes: the data holds no item of a group");
      i = g[(size_t)r.below((int64_t)g.size())];
    } else {
      i = r.below(items.n);
    }
    const int label = items.labels.data<uint8_t>()[i];
    const uint8_t cls = (uint8_t)((shapes ? kShapeOf[label] : label) + 1);
    const uint8_t* src = items.images.data<uint8_t>() + i * 28 * 28;
    const int x0 = (int)r.below(S - 28 + 1), y0 = (int)r.below(S - 28 + 1);
    for (int y = 0; y < 28; ++y)
      for (int x = 0; x < 28; ++x) {
        const uint8_t v = src[y * 28 + x];
        const size_t p = (size_t)(y0 + y) * S + (x0 + x);
        if (v > o.threshold) {  // ink: this item is what shows here
          img->px[p] = v;
          mask->px[p] = cls;
        } else {
          img->px[p] = std::max(img->px[p], v);
        }
      }
  }
}

nlohmann::json request_of(const ExportSegmentationOptions& o) {
  std::error_code ec;
  nlohmann::json files = nlohmann::json::object();
  for (const auto& e : fs::directory_iterator(o.data, ec))
    if (e.is_regular_file(ec)) files[e.path().filename().string()] = (int64_t)e.file_size(ec);
  nlohmann::json req = {{"kind", "segmentation"},
          {"data", {{"path", fs::weakly_canonical(fs::absolute(o.data), ec).string()}, {"files", files}}},
          {"seed", o.seed},
          {"count", o.count},
          {"canvas", o.canvas},
          {"items", {o.min_items, o.max_items}},
          {"threshold", o.threshold}};
  if (o.classes != "items") req["classes"] = o.classes;  // absent for items: earlier exports stay valid
  return req;
}

std::string differences(const nlohmann::json& had, const nlohmann::json& asked) {
  std::string d;
  for (auto it = asked.begin(); it != asked.end(); ++it)
    if (!had.contains(it.key()) || had[it.key()] != it.value())
      d += (d.empty() ? "" : ", ") + it.key() + (had.contains(it.key()) ? " " + had[it.key()].dump() + " there, " : " (none there), ") +
           it.value().dump() + " asked";
  for (auto it = had.begin(); it != had.end(); ++it)  // a setting there that this request leaves at its default
    if (!asked.contains(it.key())) d += (d.empty() ? "" : ", ") + it.key() + " " + it.value().dump() + " there, default asked";
  if (d.size() > 400) d = d.substr(0, 400) + "...";
  return d;
}

// The first entry of out that this export does not write, "" when none.
std::string foreign_entry(const fs::path& out) {
  std::error_code ec;
  auto numbered_png = [](const std::string& n) {
    return n.size() == 10 && n.substr(6) == ".png" &&
           std::all_of(n.begin(), n.begin() + 6, [](char c) { return c >= '0' && c <= '9'; });
  };
  for (const auto& e : fs::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    if (name == kMarker || (name == "classes.txt" && e.is_regular_file(ec))) continue;
    if ((name != "train" && name != "val") || !e.is_directory(ec)) return e.path().string();
    for (const auto& kind : fs::directory_iterator(e.path(), ec)) {
      const std::string kn = kind.path().filename().string();
      if ((kn != "images" && kn != "masks") || !kind.is_directory(ec)) return kind.path().string();
      for (const auto& f : fs::directory_iterator(kind.path(), ec))
        if (!f.is_regular_file(ec) || !numbered_png(f.path().filename().string())) return f.path().string();
    }
  }
  return "";
}

int64_t write_split(const Items& items, const ExportSegmentationOptions& o, const std::string& split, int64_t n,
                    uint64_t split_key) {
  const fs::path dir = fs::path(o.out) / split;
  fs::create_directories(dir / "images");
  fs::create_directories(dir / "masks");
  char name[32];
  for (int64_t i = 0; i < n; ++i) {
    Image img, mask;
    SplitMix key{o.seed * 0x9e3779b97f4a7c15ULL ^ (split_key << 32) ^ ((uint64_t)i * 0xd1342543de82ef95ULL)};
    make_sample(items, o, key.next(), &img, &mask);
    std::snprintf(name, sizeof name, "%06lld.png", (long long)i);
    // Plain writes (the marker written last says the folder is complete).
    for (const auto& [sub, im] : {std::pair<const char*, const Image*>{"images", &img}, {"masks", &mask}}) {
      const std::string path = (dir / sub / name).string();
      const std::string bytes = encode_png(*im, path);
      std::ofstream f(path, std::ios::binary | std::ios::trunc);
      f.write(bytes.data(), (std::streamsize)bytes.size());
      KILN_CHECK(f.good(), "export-images --segmentation: cannot write ", path);
    }
    if (o.progress && ((i + 1) % 500 == 0 || i + 1 == n)) o.progress(split, i + 1, n);
  }
  return n;
}

}  // namespace

const char* const* fashion_mnist_segmentation_classes(const std::string& classes) {
  return classes == "shapes" ? kShapeClasses : kClasses;
}

ExportSegmentationResult export_segmentation(const ExportSegmentationOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  KILN_CHECK(!o.out.empty(), "export-images --segmentation: the output folder is required");
  KILN_CHECK(o.count >= 1 && o.count <= 10000000, "export-images --segmentation: --count must be 1..10000000, got ",
             o.count);
  KILN_CHECK(o.canvas >= 28 && o.canvas <= 4096, "export-images --segmentation: --canvas must be 28..4096 (items are "
             "28x28), got ", o.canvas);
  KILN_CHECK(o.min_items >= 1 && o.max_items >= o.min_items && o.max_items <= 64,
             "export-images --segmentation: items per canvas must satisfy 1 <= min <= max <= 64, got ", o.min_items,
             "..", o.max_items);
  KILN_CHECK(o.threshold >= 0 && o.threshold < 255, "export-images --segmentation: threshold must be 0..254");
  KILN_CHECK(o.classes == "items" || o.classes == "shapes", "export-images --segmentation: --classes must be items "
             "or shapes, got '", o.classes, "'");
  std::error_code ec;
  KILN_CHECK(fs::is_directory(o.data, ec), "export-images --segmentation: --data ", o.data,
             " is not a folder (apt install dataset-fashion-mnist, or --data FOLDER with the IDX files)");
  ExportSegmentationResult r;
  const fs::path out(o.out);
  const nlohmann::json asked = request_of(o);
  if (fs::exists(out, ec)) {
    KILN_CHECK(fs::is_directory(out, ec), "export-images --segmentation: ", o.out, " exists and is not a folder");
    nlohmann::json had;
    if (fs::exists(out / kMarker, ec)) {
      std::ifstream f(out / kMarker);
      const nlohmann::json m = nlohmann::json::parse(f, nullptr, false);
      if (!m.is_discarded() && m.is_object() && m.contains("request")) had = m["request"];
    }
    if (!o.force && had.is_object()) {
      r.replaced = differences(had, asked);
      if (r.replaced.empty()) {
        r.skipped = true;
        return r;
      }
    }
    const std::string foreign = foreign_entry(out);
    KILN_CHECK(o.force || foreign.empty(), "export-images --segmentation: ", o.out, " holds files kiln's export did "
               "not write (", foreign, "); give another folder, or --force to write the export into it");
    if (foreign.empty()) {  // an export of kiln's own (or an empty folder): its files go
      fs::remove(out / kMarker, ec);
      fs::remove_all(out / "train", ec);
      fs::remove_all(out / "val", ec);
    }
  }
  fs::create_directories(out);
  fs::remove(out / kMarker, ec);
  const MnistFiles mf = find_mnist_files(o.data);
  const Items train = load_items(mf.train_images, mf.train_labels, o.data);
  const Items test = mf.has_test() ? load_items(mf.test_images, mf.test_labels, o.data) : train;
  r.train = write_split(train, o, "train", o.count, 0x7472616e);
  r.val = write_split(test, o, "val", std::max<int64_t>(1, o.count / 5), 0x76616c);
  std::string names;
  int64_t n_classes = 0;
  for (const char* const* c = fashion_mnist_segmentation_classes(o.classes); *c; ++c, ++n_classes)
    names += std::string(*c) + "\n";
  atomic_write_file((out / "classes.txt").string(), names.data(), names.size());
  const nlohmann::json mj = {{"kiln_export", 1}, {"request", asked}, {"train", r.train}, {"val", r.val},
                             {"classes", n_classes}};
  const std::string marker = mj.dump(1) + "\n";
  atomic_write_file((out / kMarker).string(), marker.data(), marker.size());
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace kiln
