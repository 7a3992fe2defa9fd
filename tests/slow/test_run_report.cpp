// The training report in a real browser: two small `kiln train` runs into one OUT (the first with
// --report), then `kiln report OUT -o report.html`. Headless Chromium (Debian's chromium) loads the
// page with a probe script appended that moves the mouse over the learning-rate and loss charts
// and reads the hover box back from the DOM (--dump-dom); the values shown must be the ledger's
// curve points at the hovered step. A screenshot must be a PNG with a drawing on it. Skips with a
// message when chromium is not installed.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "data/decode.h"
#include "support/chromium.h"
#include "support/cli/run_kiln.h"

using kiln_test::check_screenshot;
using kiln_test::contains;
using kiln_test::have_chromium;
using kiln_test::read_all;
using kiln_test::run_kiln;
using nlohmann::json;

namespace {

std::string chromium(const std::string& dir) {
  return "timeout 120 chromium --headless --disable-gpu --no-sandbox --hide-scrollbars --user-data-dir=" + dir +
         "/chrome-profile ";
}

// Moves the mouse to step `step` of series 0 in each named chart and records the hover box's text and
// the guide line's x; the results go into <pre id=probe> as JSON.
const char* kProbe = R"js(<script>
(function(){
  var charts = JSON.parse(document.getElementById('chart-data').textContent), out = {};
  ['chart-lr','chart-loss'].forEach(function(id){
    var c = charts.filter(function(d){ return d.id === id; })[0], svg = document.getElementById(id);
    var r = svg.getBoundingClientRect(), step = PROBE_STEP;
    var ux = c.left + (step - c.x0) / (c.x1 - c.x0) * c.width;
    svg.dispatchEvent(new MouseEvent('mousemove', {bubbles: true, clientX: r.left + ux * r.width / c.vw,
                                                   clientY: r.top + r.height / 2}));
    var tip = document.getElementById('tip-' + id);
    out[id] = {text: tip.textContent, display: tip.style.display, guide: Number(svg.querySelector('.guide').getAttribute('x1')),
               expected_guide: ux};
  });
  var pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>)js";

// "r1 small_cnn: 0.04985  (step 4)" -> 0.04985, from the hover text's line for `name` at `step`.
double hover_value(const std::string& text, const std::string& name, int64_t step) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const std::string head = name + ": ", tail = "  (step " + std::to_string(step) + ")";
    if (line.rfind(head, 0) == 0 && line.size() > tail.size() &&
        line.compare(line.size() - tail.size(), tail.size(), tail) == 0)
      return std::stod(line.substr(head.size(), line.size() - head.size() - tail.size()));
  }
  FAIL_CHECK("no line '", name, ": ... (step ", step, ")' in the hover text:\n", text);
  return NAN;
}

// The curve points of the ledger's runs in order: step -> point.
std::vector<std::map<int64_t, json>> ledger_curves(const std::string& path) {
  std::vector<std::map<int64_t, json>> curves;
  std::map<std::string, size_t> run_index;
  std::istringstream in(read_all(path));
  std::string line;
  while (std::getline(in, line)) {
    const json j = json::parse(line);
    const std::string run = j["run"].get<std::string>();
    if (j["record"] == "start") {
      run_index[run] = curves.size();
      curves.emplace_back();
    } else if (j["record"] == "step") {
      curves[run_index.at(run)][j["step"].get<int64_t>()] = j;
    }
  }
  return curves;
}

}  // namespace

TEST_CASE("run report: two runs overlaid, hover values from the DOM match the ledger, screenshot") {
  if (!have_chromium()) {
    MESSAGE("SKIPPED: chromium is not installed (apt-get install chromium)");
    return;
  }
  const std::string dir = kiln_test::cli_temp_dir("run_report"), data = dir + "/data", out = dir + "/out";
  std::filesystem::create_directories(data);
  kiln_test::make_npy_folder(data, 48, 1, 12, 3);
  const std::string common = "train --model small_cnn --data " + data + " --val " + data +
                             " --epochs 3 --batch 6 --optimizer sgd --momentum 0.9 --schedule cosine --threads 2 "
                             "--device cpu --curve-every 2 --out " + out;
  const std::string train_html = dir + "/train.html";
  auto r1 = run_kiln(common + " --lr 0.05 --report " + train_html);
  REQUIRE_MESSAGE(r1.status == 0, r1.output);
  CHECK(contains(r1.output, "report: " + train_html));
  const std::string train_page = read_all(train_html);  // rewritten at the end: the run is finished
  CHECK(contains(train_page, "id='chart-loss'"));
  CHECK(contains(train_page, ">1 run, written"));
  CHECK(contains(train_page, "<tr class='ok'>"));
  auto r2 = run_kiln(common + " --lr 0.02 --seed 5");
  REQUIRE_MESSAGE(r2.status == 0, r2.output);

  const std::string html = dir + "/report.html", png = dir + "/report.png";
  auto rep = run_kiln("report " + out + " -o " + html);
  REQUIRE_MESSAGE(rep.status == 0, rep.output);
  CHECK(contains(rep.output, "(2 runs)"));
  const std::string page = read_all(html);
  for (const char* id : {"id=runs", "id='chart-loss'", "id='chart-epoch-loss'", "id='chart-acc'", "id='chart-lr'",
                         "id='chart-ips'", "id='chart-mem-1'", "id='chart-mem-2'", "<polyline", "<polygon"})
    CHECK_MESSAGE(contains(page, id), id);
  CHECK(contains(page, "no loss scaler in these runs"));  // f32 runs: the loss-scale charts say so
  kiln_test::check_no_network(page);

  // Hover through the DOM: step 10 (a curve point of both runs: 8 steps an epoch, a point every 2).
  const int64_t step = 10;
  std::string probe_page = page, probe = kProbe;
  probe.replace(probe.find("PROBE_STEP"), 10, std::to_string(step));
  probe_page.insert(probe_page.rfind("</body>"), probe);
  const std::string probe_html = dir + "/probe.html";
  std::ofstream(probe_html) << probe_page;
  const std::string dom = dir + "/dom.html";
  REQUIRE(std::system((chromium(dir) + "--dump-dom file://" + probe_html + " > " + dom + " 2>/dev/null").c_str()) == 0);
  const std::string dumped = read_all(dom);
  const size_t a = dumped.find("<pre id=\"probe\">"), b = dumped.find("</pre>", a);
  REQUIRE_MESSAGE(a != std::string::npos, dumped.substr(0, 400));
  std::string text = dumped.substr(a + 16, b - a - 16);
  for (auto [from, to] : std::vector<std::pair<std::string, std::string>>{{"&quot;", "\""}, {"&lt;", "<"},
                                                                          {"&gt;", ">"}, {"&amp;", "&"}})
    for (size_t p = text.find(from); p != std::string::npos; p = text.find(from, p + to.size()))
      text.replace(p, from.size(), to);
  const json hover = json::parse(text);
  MESSAGE("hover: ", hover.dump());
  const auto curves = ledger_curves(out + "/runs.jsonl");
  REQUIRE(curves.size() == 2);
  REQUIRE(curves[0].count(step));
  REQUIRE(curves[1].count(step));
  for (const char* id : {"chart-lr", "chart-loss"}) {
    const json& h = hover[id];
    CHECK(h["display"] == "block");
    CHECK(h["guide"].get<double>() == doctest::Approx(h["expected_guide"].get<double>()).epsilon(1e-6));
    const std::string key = std::string(id) == "chart-lr" ? "lr" : "loss";
    const std::string text_shown = h["text"].get<std::string>();
    for (size_t run = 0; run < 2; ++run) {
      const double want = curves[run].at(step)[key].get<double>();
      const double shown = hover_value(text_shown, "r" + std::to_string(run + 1) + " small_cnn", step);
      CHECK_MESSAGE(shown == doctest::Approx(want).epsilon(1e-3), id, " run ", run + 1);
      // Not the neighbouring points' values: the hover picked the hovered step.
      for (int64_t other : {step - 2, step + 2})
        if (curves[run].count(other))
          CHECK(std::abs(curves[run].at(other)[key].get<double>() - want) > 2e-3 * std::abs(want));
    }
  }
  const std::string cmd = chromium(dir) + "--screenshot=" + png + " --window-size=1200,1600 file://" + html +
                          " > /dev/null 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  check_screenshot(png, 1200, 1600, 20, 10000);  // text, two runs' curve colours, the memory tags; the stacked memory timelines alone cover > 10000
}
