// kill -9 at 20 moments of a `kiln train --checkpoint-every 1ep,3steps` run, then --resume: every
// time the run continues and its final weights are the bytes of an uninterrupted run, the state
// file is never torn, and the temporary of a killed write is cleaned up. The moments come from a
// fixed seed: 10 are byte offsets into the run's state writes (KILN_TEST_KILL_WRITE_AT makes the
// writer kill itself there, engine/io/atomic_file.h), 10 are delays after the start at which the
// test sends SIGKILL (between steps, inside a step, or during a write, wherever they fall).
// Multi-process, a few dozen runs of a tiny model: label slow.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <sstream>
#include <thread>

#include "engine/io/file_bytes.h"
#include "engine/io/safetensors.h"
#include "support/cli/run_kiln.h"

using kiln_test::contains;
using kiln_test::run_kiln;
namespace fs = std::filesystem;

namespace {

std::string train_args(const std::string& data, const std::string& out) {
  return "train --model small_cnn --data " + data +
         " --epochs 2 --batch 4 --optimizer adamw --lr 0.003 --schedule cosine --warmup 5 --seed 3 --threads 1 "
         "--device cpu --checkpoint-every 1ep,3steps --out " + out + " --save " + out + "/w.safetensors";
}

// Starts kiln with `args` (split on spaces), waits `delay`, sends SIGKILL. Returns true when the
// signal found the process still running.
bool run_and_kill(const std::string& args, std::chrono::microseconds delay) {
  std::vector<std::string> words{std::string(KILN_BINARY_DIR) + "/kiln"};
  std::istringstream ss(args);
  for (std::string w; ss >> w;) words.push_back(w);
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  std::fflush(stdout);  // the child must not write the test's buffered output a second time
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    ::setenv("OMP_WAIT_POLICY", "passive", 1);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  std::this_thread::sleep_for(delay);
  int st = 0;
  const bool running = ::waitpid(pid, &st, WNOHANG) == 0;
  if (running) ::kill(pid, SIGKILL);
  if (running) ::waitpid(pid, &st, 0);
  return running;
}

int count_temporaries(const std::string& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += (int)contains(e.path().filename().string(), ".tmp.");
  return n;
}

}  // namespace

TEST_CASE("kill -9 at 20 seeded moments of kiln train, then --resume: the uninterrupted run's bytes every time") {
  const std::string data = kiln_test::cli_temp_dir("kill_data");
  kiln_test::make_npy_folder(data, 48, 1, 8, 2);  // batch 4: 12 steps an epoch, 24 in all
  const std::string ref = kiln_test::cli_temp_dir("kill_ref");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = run_kiln(train_args(data, ref));
  const auto run_time = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  const std::vector<uint8_t> want = kiln::read_file_bytes(ref + "/w.safetensors");
  const int64_t state_bytes = (int64_t)fs::file_size(ref + "/checkpoint.safetensors");
  // State writes of a run: after steps 3, 6, 9, epoch 1's end (12), 15, 18, 21, the end (24).
  const std::vector<int64_t> write_steps = {3, 6, 9, 12, 15, 18, 21, 24};
  const int64_t writes = (int64_t)write_steps.size();

  std::mt19937_64 rng(14);
  int killed = 0, before_first_state = 0, during_write = 0, finished_first = 0;
  std::ostringstream table;
  for (int trial = 0; trial < 20; ++trial) {
    const std::string out = kiln_test::cli_temp_dir("kill_" + std::to_string(trial));
    const bool by_byte = trial % 2 == 0;
    std::string moment;
    bool was_killed = true;
    int64_t expect_step = -2;  // the state a byte kill must leave (-1: none yet); -2: not known
    if (by_byte) {
      const int64_t at = (int64_t)(rng() % (uint64_t)(writes * state_bytes));
      // Files differ by a few dozen bytes of metadata, so write w (0-based) starts within
      // 8 * 100 bytes of w * state_bytes: away from a boundary the killed write is known.
      const int64_t w = at / state_bytes, off = at % state_bytes;
      if (off > 2000 && off < state_bytes - 2000) expect_step = w == 0 ? -1 : write_steps[(size_t)w - 1];
      moment = "byte " + std::to_string(at % state_bytes) + " of write " + std::to_string(at / state_bytes + 1);
      auto k = run_kiln(train_args(data, out), "KILN_TEST_KILL_WRITE_AT=" + std::to_string(at));
      CHECK_MESSAGE((k.status == -1 || k.status == 137), moment, k.output);
      ++during_write;
    } else {
      const auto delay = std::chrono::microseconds((int64_t)(rng() % (uint64_t)run_time.count()));
      moment = std::to_string(delay.count() / 1000) + " ms after the start";
      was_killed = run_and_kill(train_args(data, out), delay);
      finished_first += (int)!was_killed;
    }
    killed += (int)was_killed;
    const std::string state = out + "/checkpoint.safetensors";
    std::string found = "no state file";
    bool have_state = fs::exists(state);
    if (have_state) {
      // Never torn: whatever the moment, the file is a whole training state.
      kiln::SafetensorsFile f = kiln::read_safetensors(state);
      REQUIRE(f.metadata.at("format") == "kiln-checkpoint-1");
      found = "state at step " + f.metadata.at("step");
      // Never lost: the newest complete write is there.
      if (expect_step != -2) CHECK_MESSAGE(f.metadata.at("step") == std::to_string(expect_step), moment);
    } else {
      before_first_state += 1;
      if (expect_step != -2) CHECK_MESSAGE(expect_step == -1, moment);
    }
    const std::string resume = have_state ? " --resume " + state : "";
    auto rr = run_kiln(train_args(data, out) + resume);
    CAPTURE(moment);
    REQUIRE_MESSAGE(rr.status == 0, rr.output);
    CHECK(kiln::read_file_bytes(out + "/w.safetensors") == want);
    CHECK(count_temporaries(out) == 0);
    table << "  " << trial + 1 << ": " << moment << (was_killed ? ", killed" : ", finished before the kill")
          << "; " << found << "; resumed: same bytes\n";
    fs::remove_all(out);
  }
  MESSAGE("kill -9 trials (reference run " << run_time.count() / 1000 << " ms, state file " << state_bytes
                                           << " bytes):\n"
                                           << table.str() << killed << " killed (" << during_write
                                           << " inside a state write by the byte hook), " << finished_first
                                           << " finished before the signal, " << before_first_state
                                           << " before any state file existed");
  CHECK(killed >= 10);  // the byte hook's 10 always kill; a delay may outlast a fast run
}
