// bf16 mixed precision against PyTorch 1.13's CPU autocast (torch.autocast("cpu", dtype=torch.bfloat16)), the
// same weights and inputs: a conv + batch norm + relu + linear net (tests/support/bf16_tiny_net.h), its bf16
// logits, its cross-entropy loss and the f32 master weights' gradients (tests/support/oracle/amp_bf16.py).
// Both sides round the same values to bf16 at the same places (the casts of x and the weights are the same
// round-to-nearest-even of the same f32 numbers; conv, batch norm and linear outputs are bf16 on both, the loss
// is f32 on both, as the oracle's dtypes.txt confirms); they differ in accumulation order (oneDNN's kernels
// against kiln's), which can tip a bf16 rounding one way on one side and the other way on the other. The
// tolerance is the sum of both sides' bounds against exact arithmetic (tests/unit/test_amp_bf16.cpp derives
// them): each result is a sum of terms that went through at most R bf16 roundings of relative error <= u = 2^-8
// (8 significant bits), so it is within R u ||A|| of exact in the 2-norm, A = the sums of |terms| (computed in
// f64 from kiln's f32 run; tests/support/bf16_tiny_net.h lists the reductions), in any summation order. Hence
// ||kiln - torch|| <= 2 R u ||A||: R = 6 for the logits (x, both weights, conv, batch norm and linear outputs),
// 10 for the gradients (also the logits' gradient cast to bf16, the linear and batch norm backward outputs and the
// weight gradient's own rounding); the loss (cross-entropy is 2-Lipschitz in each row's max norm of the logits)
// within 2 x the logits' bound. Measured differences are far below (a rounding tips rarely): the messages print.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/io/npy.h"
#include "support/bf16_tiny_net.h"
#include "support/tensor_host.h"

using namespace kiln;
using kiln::test::from_host;
using kiln::test::to_host;

TEST_CASE("parity amp bf16: conv+bn+relu+linear under torch.autocast(cpu, bfloat16): logits, loss, master grads") {
  namespace fs = std::filesystem;
  const std::string dir =
      (fs::temp_directory_path() / ("kiln_parity_amp_bf16_" + std::to_string(::getpid()))).string();
  fs::create_directories(dir);
  const test::TinyNet net = test::make_tiny_net(23);
  write_npy(dir + "/x.npy", to_host(net.x));
  write_npy(dir + "/y.npy", to_host(net.y));
  for (const auto& [name, p] : net.params) write_npy(dir + "/" + name + ".npy", to_host(p));
  const std::string cmd = std::string("/usr/bin/python3 ") + KILN_SOURCE_DIR + "/tests/support/oracle/amp_bf16.py '" +
                          dir + "' > '" + dir + "/oracle.log' 2>&1";
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "the oracle failed, see " << dir << "/oracle.log");
  // PyTorch's autocast put the same ops in bf16 and the loss in f32 as kiln's.
  std::ifstream dt(dir + "/dtypes.txt");
  std::stringstream dts;
  dts << dt.rdbuf();
  CHECK(dts.str() == "conv bfloat16\nbatch_norm bfloat16\nrelu bfloat16\nlinear bfloat16\nloss float32\n");

  const test::TinyRun kb = test::run_tiny(net, true);
  const test::TinyRun f32 = test::run_tiny(net, false);
  const test::TinyScales a = test::tiny_scales(net, f32);
  const double u = std::ldexp(1.0, -8);

  const Tensor logits = from_host(read_npy(dir + "/logits.npy"));
  const double dz = test::l2_diff(kb.logits, logits), zb = 2 * 6 * u * test::l2(a.logits);
  MESSAGE("logits: ||kiln - torch|| = ", dz, " (bound ", zb, ")");
  CHECK(dz <= zb);
  const double tl = from_host(read_npy(dir + "/loss.npy")).item(), kl = kb.loss.item();
  MESSAGE("loss: kiln ", kl, ", torch ", tl, ", |difference| ", std::fabs(kl - tl), " (bound ", 2 * zb, ")");
  CHECK(std::fabs(kl - tl) <= 2 * zb);
  for (size_t i = 0; i < net.params.size(); ++i) {
    CAPTURE(net.params[i].first);
    const Tensor g = from_host(read_npy(dir + "/grad_" + net.params[i].first + ".npy"));
    REQUIRE(g.sizes() == kb.grads[i].sizes());
    const double d = test::l2_diff(kb.grads[i], g), bound = 2 * 10 * u * test::l2(a.grads[i]);
    MESSAGE(net.params[i].first, ": ||kiln - torch|| = ", d, " (bound ", bound, "; ||torch|| ", test::l2(g), ")");
    CHECK(d <= bound);
  }
  fs::remove_all(dir);
}
