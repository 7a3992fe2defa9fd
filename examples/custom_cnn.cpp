// Your own CNN, trained by kiln: a Module subclass that is not in kiln's models/, trained with
// train::fit on an image folder (root/train/<class>/*.jpg, root/val/<class>/*.jpg), evaluated,
// saved as safetensors, reloaded into a fresh model and checked to give the same results.
//   custom_cnn [IMAGE_FOLDER]    (no folder: a small synthetic one is written to a temporary folder)
// Exit status 0 when the reloaded model matches and the model learned the task (val accuracy
// >= 0.9 on the synthetic data, whose classes differ in the brightness of the top half).
#include <kiln/kiln.h>

#include <cstdio>
#include <filesystem>
#include <string>


using namespace kiln;
namespace fs = std::filesystem;

// conv(3->8) BN ReLU pool, conv(8->16) BN ReLU, global average pool, linear(16->K).
class TinyNet : public nn::Module {
 public:
  explicit TinyNet(int64_t classes) : Module("TinyNet") {
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(3, 8, 3, 1, 1));
    bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(8));
    conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(8, 16, 3, 1, 1));
    bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(16));
    fc = register_module("fc", std::make_shared<nn::Linear>(16, classes));
  }
  Tensor forward(const Tensor& x) override {                    // x: (N, 3, S, S)
    Tensor y = max_pool2d(relu((*bn1)((*conv1)(x))), {2, 2});  // (N, 8, S/2, S/2)
    y = relu((*bn2)((*conv2)(y)));                             // (N, 16, S/2, S/2)
    y = mean(y, {2, 3});                                       // (N, 16)
    return (*fc)(y);                                           // (N, K)
  }
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Linear> fc;
};

// Two classes, 24 training and 12 validation JPEGs each, 16x16: class c has a top half of
// brightness 40 + 160c plus noise.
std::string write_synthetic_folder() {
  const fs::path root = fs::temp_directory_path() / "kiln_custom_cnn_data";
  fs::remove_all(root);
  uint32_t state = 12345;
  for (const char* split : {"train", "val"})
    for (int c = 0; c < 2; ++c) {
      const fs::path dir = root / split / (c == 0 ? "dark" : "bright");
      fs::create_directories(dir);
      const int n = std::string(split) == "train" ? 24 : 12;
      for (int i = 0; i < n; ++i) {
        Image im;
        im.w = im.h = 16;
        im.c = 3;
        im.px.resize(16 * 16 * 3);
        for (int y = 0; y < 16; ++y)
          for (int x = 0; x < 16 * 3; ++x) {
            state = state * 1664525u + 1013904223u;
            const int noise = (int)(state >> 26);  // 0..63
            im.px[(size_t)(y * 16 * 3 + x)] = (uint8_t)std::min(255, (y < 8 ? 40 + 160 * c : 30) + noise);
          }
        write_jpeg((dir / (std::to_string(i) + ".jpg")).string(), im, 95);
      }
    }
  return root.string();
}

int main(int argc, char** argv) {
  const bool synthetic = argc < 2;
  const std::string folder = synthetic ? write_synthetic_folder() : argv[1];
  manual_seed(0);

  ImageDataOptions data_options;
  data_options.data = folder;
  data_options.image.image_size = "16";
  data_options.image.workers = 1;
  TrainData data = open_image_train_data(data_options, Device::cpu());
  if (!data.val) {
    std::fprintf(stderr, "custom_cnn: %s has no val/ (or test/) split\n", folder.c_str());
    return 2;
  }
  std::printf("data: %s, %lld training and %lld validation images, %lld classes\n", folder.c_str(),
              (long long)data.train->size(), (long long)data.val->size(), (long long)data.num_classes);

  auto model = std::make_shared<TinyNet>(data.num_classes);
  optim::SGDOptions sgd;
  sgd.lr = 0.05;
  sgd.momentum = 0.9;
  optim::SGD optimizer(model->named_parameters(), sgd);
  optim::LossScalerOptions no_scaling;
  no_scaling.enabled = false;
  optim::LossScaler scaler(no_scaling);

  train::FitOptions fit;
  fit.epochs = 6;
  fit.batch = 8;
  fit.callbacks.on_epoch_end = [](train::EpochStats& e) {
    std::printf("epoch %lld: train loss %.4f acc %.3f, val loss %.4f acc %.3f, %lld steps\n", (long long)e.epoch,
                e.train_loss, e.train_acc, e.val_loss, e.val_acc, (long long)e.steps);
  };
  train::fit(*model, optimizer, scaler, *data.train, data.val.get(), fit);

  const EvalResult before = evaluate_source(*model, *data.val, 8, 0);
  const std::string weights = (fs::temp_directory_path() / "kiln_custom_cnn.safetensors").string();
  save_safetensors(weights, model->state_dict());
  auto reloaded = std::make_shared<TinyNet>(data.num_classes);
  reloaded->load_state_dict(load_safetensors(weights));
  const EvalResult after = evaluate_source(*reloaded, *data.val, 8, 0);
  std::printf("saved %s; reloaded model: val loss %.6f acc %.3f (trained model: %.6f, %.3f)\n", weights.c_str(),
              after.loss, after.accuracy, before.loss, before.accuracy);
  const bool same = after.loss == before.loss && after.accuracy == before.accuracy;
  std::printf("reloaded model %s the trained one\n", same ? "matches" : "DIFFERS FROM");
  if (!same) return 1;
  if (synthetic && after.accuracy < 0.9) {
    std::printf("custom_cnn: val accuracy %.3f < 0.9 on the synthetic data: the model did not learn\n", after.accuracy);
    return 1;
  }
  return 0;
}
