// The image-pipeline options of `kiln train` / `kiln predict` (--image-size, --resize, --crop,
// --augment, --normalize, --balance, --workers, --pin-memory, --prefetch, --channels) as one value type, with
// the parsers of their text forms: an image-size schedule ("128:10,224": 128 px for 10 epochs,
// then 224 — progressive resizing) and a normalization ("imagenet", "auto", "none",
// "m1,m2,m3:s1,s2,s3"). Pure: no files, no decoding. Used only when --data is an image folder or
// a CSV list; the array (IDX/npy) path ignores it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln {

// Epoch -> image size. Stages are (size, epochs); the last stage lasts forever (its epoch count 0).
struct ImageSizeSchedule {
  struct Stage {
    int size = 0;
    int64_t epochs = 0;  // 0 on the last stage: every remaining epoch
  };
  std::vector<Stage> stages;  // empty: "use the data's own size"

  // "224" or "128:10,160:5,224". Throws kiln::Error naming the text.
  static ImageSizeSchedule parse(const std::string& text);
  bool empty() const { return stages.empty(); }
  bool progressive() const { return stages.size() > 1; }
  int at_epoch(int64_t epoch) const;  // 0-based epoch; 0 when empty
  int final_size() const { return stages.empty() ? 0 : stages.back().size; }
  std::string str() const;
};

// How inputs are normalized: (x/255 - mean[c]) / std[c].
struct Normalization {
  enum class Kind { none, imagenet, automatic, custom } kind = Kind::none;
  std::vector<float> mean, std;  // custom: 1 or 3 values each

  // "none" | "imagenet" | "auto" | "m1,m2,m3:s1,s2,s3" (or "m:s" for one channel).
  static Normalization parse(const std::string& text);
  // The per-channel values for `channels` (1 or 3) channels, for none/imagenet/custom. imagenet on
  // one channel uses the means of ImageNet's three values. Throws on a channel-count mismatch.
  void values(int channels, float* mean_out, float* std_out) const;
  std::string str() const;
};

struct ImageOptions {
  std::string image_size;       // schedule text; "" = the first training image's size
  int resize = 0;               // shorter side before the centre crop (eval); 0 = the image size
  std::string crop = "center";  // center (resize shorter side + centre crop) | none (resize to SxS)
  std::string augment = "none"; // none | flip | rrc | rrc:MIN_SCALE (RandomResizedCrop + flip)
  std::string normalize = "none";
  bool balance = false;  // weighted sampler with inverse class frequencies
  int workers = 0;       // loader threads (0: half the cores)
  bool pin_memory = false;
  int prefetch = 4;      // batches decoded ahead of the training step (the loader's queue depth, >= 1)
  int channels = 3;  // 1 (grayscale, PIL 'L') or 3 (RGB)

  // Throws kiln::Error on any malformed value (called before any data is read).
  void validate() const;
  // augment: whether training uses RandomResizedCrop, its min scale, and whether it flips.
  bool uses_rrc() const;
  float rrc_min_scale() const;
  bool uses_flip() const;
  nlohmann::json to_json() const;
};

}  // namespace kiln
