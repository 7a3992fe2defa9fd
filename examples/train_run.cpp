// A whole training run from a library program: planned, then trained with training-state files every
// 5 steps (mid-epoch too), the run ledger OUT/runs.jsonl and the final weights; --resume continues a
// killed run from OUT/checkpoint.safetensors to the bytes an uninterrupted run gives.
//   train_run FOLDER OUT [--resume]     FOLDER: train/<class>/*.jpg (+ val/<class>/*.jpg), 16x16 or larger
#include <kiln/kiln.h>

#include <iostream>
#include <string>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: train_run FOLDER OUT [--resume]\n";
    return 2;
  }
  kiln::RunConfig c;
  c.model = "small_cnn";
  c.data = argv[1];
  c.out = argv[2];
  c.image.image_size = "16";
  c.epochs = 2, c.batch = 4, c.optimizer = "adamw", c.lr = 1e-3;
  c.checkpoint_steps = 5;
  c.save = c.out + "/weights.safetensors";
  if (argc > 3 && std::string(argv[3]) == "--resume") c.resume = c.out + "/checkpoint.safetensors";
  try {
    kiln::Run run(c, {&std::cout});       // checks, data, the --resume state, the memory plan
    std::cout << run.plan().text();
    const kiln::RunResult r = run.train();
    if (!r.epochs.empty()) std::cout << "train_run: " << r.steps << " steps, val acc " << r.epochs.back().val_acc << "\n";
  } catch (const std::exception& e) {
    std::cerr << "train_run: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
