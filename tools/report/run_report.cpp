// The training report page (see run_report.h). Every chart is drawn here as SVG, so the page shows
// its curves without scripts; the chart data also goes into the page as JSON, which the inline
// script reads to show the values under the mouse (the nearest point of every series).
#include "tools/report/run_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <sstream>

#include "engine/io/atomic_file.h"
#include "engine/memory/tag.h"
#include "tools/runs_table.h"

namespace kiln_cli {
using nlohmann::json;
using kiln::train::LedgerRun;

namespace {

const char* const kRunColor[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                 "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"};
// In MemoryTag order (param, grad, optimizer, activation, temporary, data, other, param_f16), as the memory report.
const char* const kTagColor[] = {"#4e79a7", "#f28e2b", "#b07aa1", "#e15759",
                                 "#76b7b2", "#59a14f", "#bab0ac", "#edc948"};

// Chart geometry in SVG user units (the viewBox); the script maps mouse positions with the same numbers.
constexpr double kW = 540, kH = 250, kLeft = 62, kRight = 14, kTop = 14, kBottom = 40;

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

std::string tick_label(double v) {
  char b[32];
  if (std::abs(v) >= 1000 && std::abs(v) < 1e9) std::snprintf(b, sizeof b, "%.0f", v);  // 65536, not 6.554e+04
  else std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

struct Series {
  std::string name, color;
  bool dashed = false;
  std::vector<std::pair<double, double>> pts;  // (x, y), x ascending
};

struct Chart {
  std::string id, title, xlabel, ylabel;
  std::vector<Series> series;
  bool stacked = false;  // series drawn as stacked areas (the memory timeline)
  std::string empty_note;
};

// A "nice" step for about n ticks over span.
double nice_step(double span, int n) {
  const double raw = span / n, mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

// The chart as SVG, and its data (for hovering) appended to `data`.
std::string render_chart(const Chart& c, json& data) {
  std::ostringstream o;
  o << "<div class=chart-box><h3>" << esc(c.title) << "</h3>";
  bool any = false;
  for (const Series& s : c.series) any = any || !s.pts.empty();
  if (!any) {
    o << "<p class=note id='" << esc(c.id) << "'>" << esc(c.empty_note.empty() ? "no data" : c.empty_note)
      << "</p></div>";
    return o.str();
  }
  // Ranges (stacked: of the sums).
  double x0 = 1e300, x1 = -1e300, y0 = 0, y1 = -1e300;
  bool y_from_zero = c.stacked;
  std::vector<std::vector<double>> stack;  // cumulative y per series and point (stacked charts share x)
  for (const Series& s : c.series)
    for (const auto& [x, y] : s.pts) {
      x0 = std::min(x0, x);
      x1 = std::max(x1, x);
    }
  if (c.stacked) {
    std::vector<double> base;
    for (const Series& s : c.series) {
      std::vector<double> cum(s.pts.size());
      for (size_t i = 0; i < s.pts.size(); ++i) {
        cum[i] = s.pts[i].second + (i < base.size() ? base[i] : 0);
        y1 = std::max(y1, cum[i]);
      }
      stack.push_back(cum);
      base = cum;
    }
  } else {
    double lo = 1e300;
    for (const Series& s : c.series)
      for (const auto& p : s.pts)
        if (std::isfinite(p.second)) {
          lo = std::min(lo, p.second);
          y1 = std::max(y1, p.second);
        }
    y0 = y_from_zero ? 0 : lo;
    if (lo >= 0 && lo < 0.25 * y1) y0 = 0;  // close to zero: start at zero
  }
  if (!(y1 > y0)) {
    y1 = y0 + (std::abs(y0) > 0 ? std::abs(y0) * 0.1 : 1);
    y0 -= (y1 - y0);
  }
  if (!(x1 > x0)) {
    x0 -= 1;
    x1 += 1;
  }
  const double pad = 0.05 * (y1 - y0);
  y1 += pad;
  if (!(c.stacked || y0 == 0)) y0 -= pad;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto X = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto Y = [&](double y) { return kTop + (1 - (y - y0) / (y1 - y0)) * ph; };
  o << "<svg class=chart id='" << esc(c.id) << "' viewBox='0 0 " << kW << " " << kH << "' width=" << kW
    << " height=" << kH << " xmlns='http://www.w3.org/2000/svg'>";
  o << "<rect x=" << kLeft << " y=" << kTop << " width=" << pw << " height=" << ph << " class=plot />";
  // Grid and ticks.
  const double ys = nice_step(y1 - y0, 5), xs = std::max(nice_step(x1 - x0, 6), c.xlabel == "epoch" ? 1.0 : 0.0);
  for (double t = std::ceil(y0 / ys) * ys; t <= y1 + 1e-9 * ys; t += ys) {
    o << "<line x1=" << kLeft << " x2=" << kLeft + pw << " y1=" << num(Y(t)) << " y2=" << num(Y(t))
      << " class=grid /><text x=" << kLeft - 5 << " y=" << num(Y(t) + 4) << " class=ytick>"
      << tick_label(std::abs(t) < 1e-12 * ys ? 0 : t) << "</text>";
  }
  for (double t = std::ceil(x0 / xs) * xs; t <= x1 + 1e-9 * xs; t += xs)
    o << "<text x=" << num(X(t)) << " y=" << kTop + ph + 15 << " class=xtick>" << tick_label(t) << "</text>";
  o << "<text x=" << kLeft + pw / 2 << " y=" << kH - 6 << " class=xlabel>" << esc(c.xlabel) << "</text>";
  o << "<text x=12 y=" << kTop + ph / 2 << " class=ylabel transform='rotate(-90 12 " << kTop + ph / 2 << ")'>"
    << esc(c.ylabel) << "</text>";
  // Series.
  for (size_t si = 0; si < c.series.size(); ++si) {
    const Series& s = c.series[si];
    if (s.pts.empty()) continue;
    if (c.stacked) {
      std::string poly;
      for (size_t i = 0; i < s.pts.size(); ++i) poly += num(X(s.pts[i].first)) + "," + num(Y(stack[si][i])) + " ";
      for (size_t i = s.pts.size(); i-- > 0;) {
        const double below = si > 0 && i < stack[si - 1].size() ? stack[si - 1][i] : 0;
        poly += num(X(s.pts[i].first)) + "," + num(Y(below)) + " ";
      }
      o << "<polygon points='" << poly << "' fill='" << s.color << "' fill-opacity=0.85 stroke='" << s.color
        << "'><title>" << esc(s.name) << "</title></polygon>";
    } else {
      std::string line;
      for (const auto& [x, y] : s.pts)
        if (std::isfinite(y)) line += num(X(x)) + "," + num(Y(y)) + " ";
      o << "<polyline points='" << line << "' fill=none stroke='" << s.color << "' stroke-width=1.8"
        << (s.dashed ? " stroke-dasharray='5 3'" : "") << "><title>" << esc(s.name) << "</title></polyline>";
      if (s.pts.size() <= 60)
        for (const auto& [x, y] : s.pts)
          if (std::isfinite(y))
            o << "<circle cx=" << num(X(x)) << " cy=" << num(Y(y)) << " r=2.4 fill='" << s.color << "' />";
    }
  }
  o << "<line class=guide x1=-10 x2=-10 y1=" << kTop << " y2=" << kTop + ph << " />";
  o << "</svg>";
  // Legend.
  o << "<div class=legend>";
  for (const Series& s : c.series)
    if (!s.pts.empty())
      o << "<span><i style='background:" << s.color << (s.dashed ? ";opacity:0.6" : "") << "'></i>" << esc(s.name)
        << "</span>";
  o << "</div><div class=tip id='tip-" << esc(c.id) << "'></div></div>";
  json d = {{"id", c.id},   {"xlabel", c.xlabel}, {"x0", x0}, {"x1", x1}, {"left", kLeft},
            {"top", kTop},  {"width", pw},        {"height", ph}, {"vw", kW}, {"vh", kH},
            {"series", json::array()}};
  for (const Series& s : c.series) {
    if (s.pts.empty()) continue;
    json pts = json::array();
    for (const auto& [x, y] : s.pts) pts.push_back({x, std::isfinite(y) ? json(y) : json()});
    d["series"].push_back({{"name", s.name}, {"pts", pts}});
  }
  data.push_back(d);
  return o.str();
}

double as_num(const json& j, const char* key, double fallback = NAN) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : fallback;
}

// A run's short label in legends: "r2 small_cnn" (the table lists r2's details).
std::string label(size_t i, const LedgerRun& r) {
  const json& c = r.config();
  return "r" + std::to_string(i + 1) + " " + (c.is_object() && c.contains("model") ? c["model"].get<std::string>() : r.id);
}

// Per-step series of `key` from the curve points.
Series curve_series(size_t i, const LedgerRun& r, const char* key) {
  Series s;
  s.name = label(i, r);
  s.color = kRunColor[i % 10];
  for (const json& p : r.curve) {
    const double x = as_num(p, "step"), y = as_num(p, key);
    if (std::isfinite(x) && p.contains(key) && p[key].is_number()) s.pts.push_back({x, y});
  }
  return s;
}

Series epoch_series(size_t i, const LedgerRun& r, const char* key, const std::string& suffix, bool dashed) {
  Series s;
  s.name = label(i, r) + " " + suffix;
  s.color = kRunColor[i % 10];
  s.dashed = dashed;
  for (const json& e : r.epochs) {
    const double x = as_num(e, "epoch"), y = as_num(e, key);
    if (std::isfinite(x) && std::isfinite(y) && y >= 0) s.pts.push_back({x, y});
  }
  return s;
}

const char* kCss = R"css(
body{font:13px/1.4 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:#222;margin:18px;background:#fff}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:18px 0 6px} h3{font-size:13px;margin:0 0 2px}
.sub{color:#666} .grid2{display:flex;flex-wrap:wrap;gap:10px}
.chart-box{position:relative;border:1px solid #ddd;border-radius:4px;padding:6px 8px;width:540px}
svg.chart{display:block;cursor:crosshair} .plot{fill:#fafafa;stroke:#ccc}
.grid{stroke:#e4e4e4} .ytick{font-size:10px;text-anchor:end;fill:#555} .xtick{font-size:10px;text-anchor:middle;fill:#555}
.xlabel,.ylabel{font-size:11px;text-anchor:middle;fill:#333} .guide{stroke:#444;stroke-dasharray:2 2}
.legend span{margin-right:10px;font-size:11px;white-space:nowrap} .legend i{display:inline-block;width:10px;height:10px;margin-right:3px;vertical-align:-1px}
.tip{position:absolute;top:26px;right:14px;background:rgba(255,255,255,.94);border:1px solid #999;padding:3px 6px;
font:11px/1.35 monospace;white-space:pre;pointer-events:none;display:none}
table{border-collapse:collapse;font-size:12px} td,th{border:1px solid #ddd;padding:3px 6px;text-align:left;white-space:nowrap}
th{background:#f2f2f2} tr.failed td{background:#fde8e8} tr.killed td{background:#fff6dd} .note{color:#666}
)css";

// Hover: the nearest point (by x) of every series of the chart under the mouse, as "x\nname: y" lines.
const char* kScript = R"js(
(function(){
var charts = JSON.parse(document.getElementById('chart-data').textContent);
function fmt(v){ if(v===null) return '-'; var a=Math.abs(v);
  return (a>=1e4||(a<1e-3&&a>0)) ? v.toExponential(3) : String(Number(v.toPrecision(4))); }
charts.forEach(function(c){
  var svg=document.getElementById(c.id), tip=document.getElementById('tip-'+c.id), guide=svg.querySelector('.guide');
  function show(ev){
    var r=svg.getBoundingClientRect(), ux=(ev.clientX-r.left)*c.vw/r.width;
    var x=c.x0+(ux-c.left)/c.width*(c.x1-c.x0), lines=[], gx=null;
    c.series.forEach(function(s){
      var best=null; s.pts.forEach(function(p){ if(best===null||Math.abs(p[0]-x)<Math.abs(best[0]-x)) best=p; });
      if(best!==null){ lines.push(s.name+': '+fmt(best[1])+'  ('+c.xlabel+' '+best[0]+')');
        if(gx===null||Math.abs(best[0]-x)<Math.abs(gx-x)) gx=best[0]; }
    });
    tip.textContent=lines.join('\n'); tip.style.display='block';
    var gux=c.left+(gx-c.x0)/(c.x1-c.x0)*c.width; guide.setAttribute('x1',gux); guide.setAttribute('x2',gux);
  }
  svg.addEventListener('mousemove',show);
  svg.addEventListener('mouseleave',function(){ tip.style.display='none'; guide.setAttribute('x1',-10); guide.setAttribute('x2',-10); });
});
})();
)js";

}  // namespace

std::string render_run_report(const std::vector<LedgerRun>& runs, const std::string& title) {
  std::ostringstream o;
  json data = json::array();
  char when[32];
  std::time_t t = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  o << "<!doctype html><html><head><meta charset=utf-8><title>" << esc(title) << "</title><style>" << kCss
    << "</style></head><body>";
  o << "<h1>" << esc(title) << "</h1><p class=sub>" << runs.size() << " run" << (runs.size() == 1 ? "" : "s")
    << ", written " << when << " by kiln. Hover a chart for its values.</p>";

  // ---- the runs table ----
  o << "<h2>Runs</h2><table id=runs><tr><th>#</th>";
  for (const std::string& h : table_headers()) o << "<th>" << esc(h) << "</th>";
  o << "</tr>";
  for (size_t i = 0; i < runs.size(); ++i) {
    const json row = run_row(runs[i]);
    o << "<tr class='" << esc(runs[i].status) << "'><td style='color:" << kRunColor[i % 10] << "' title='run "
      << esc(runs[i].id) << " in " << esc(runs[i].file) << "'><b>r" << i + 1 << "</b></td>";
    for (const std::string& cell : table_cells(row)) o << "<td>" << esc(cell) << "</td>";
    o << "</tr>";
    if (!runs[i].error.empty())
      o << "<tr class=failed><td></td><td colspan=" << table_headers().size() << ">error: " << esc(runs[i].error)
        << "</td></tr>";
  }
  o << "</table>";

  // ---- curves ----
  bool any_scale = false;
  for (const LedgerRun& r : runs)
    for (const json& p : r.curve) any_scale = any_scale || p.contains("scale");
  std::vector<Chart> charts;
  Chart loss{"chart-loss", "Training loss (mean over each curve window)", "step", "loss", {}, false,
             "no curve points (a ledger from before curves, or fewer steps than --curve-every)"};
  Chart eloss{"chart-epoch-loss", "Loss per epoch (train solid, val dashed)", "epoch", "loss", {}, false, "no epochs"};
  Chart acc{"chart-acc", "Accuracy per epoch (train solid, val dashed)", "epoch", "accuracy", {}, false, "no epochs"};
  Chart lr{"chart-lr", "Learning rate", "step", "lr", {}, false, "no curve points"};
  Chart ips{"chart-ips", "Throughput", "step", "images/s", {}, false, "no curve points"};
  Chart scale{"chart-scale", "Loss scale (--amp f16)", "step", "scale", {}, false,
              "no loss scaler in these runs (f32, --amp bf16)"};
  Chart skipped{"chart-skipped", "Skipped steps per curve window (--amp, inf/NaN gradients)", "step", "steps", {},
                false, "no loss scaler in these runs (f32, --amp bf16)"};
  for (size_t i = 0; i < runs.size(); ++i) {
    const LedgerRun& r = runs[i];
    loss.series.push_back(curve_series(i, r, "loss"));
    eloss.series.push_back(epoch_series(i, r, "train_loss", "train", false));
    eloss.series.push_back(epoch_series(i, r, "val_loss", "val", true));
    acc.series.push_back(epoch_series(i, r, "train_acc", "train", false));
    acc.series.push_back(epoch_series(i, r, "val_acc", "val", true));
    lr.series.push_back(curve_series(i, r, "lr"));
    ips.series.push_back(curve_series(i, r, "ips"));
    if (any_scale) {
      scale.series.push_back(curve_series(i, r, "scale"));
      skipped.series.push_back(curve_series(i, r, "skipped"));
    }
  }
  o << "<h2>Curves</h2><div class=grid2>";
  if (!any_scale) scale.title = "Loss scale and skipped steps (--amp)";
  for (const Chart* c : {&loss, &eloss, &acc, &lr, &ips, &scale, &skipped})
    if (c != &skipped || any_scale) o << render_chart(*c, data);
  o << "</div>";

  // ---- memory by tag, one timeline per run ----
  o << "<h2>Live memory by tag</h2><p class=sub>Bytes allocated per tag at the end of the step of each curve "
       "point (stacked); the epoch's allocated peak is in the table and the epoch lines of the ledger.</p>"
       "<div class=grid2>";
  for (size_t i = 0; i < runs.size(); ++i) {
    const LedgerRun& r = runs[i];
    Chart m{"chart-mem-" + std::to_string(i + 1), label(i, r) + ": live memory by tag", "step", "MiB", {}, true,
            label(i, r) + ": no memory points in the ledger"};
    for (int t = 0; t < kiln::kNumMemoryTags; ++t) {
      Series s;
      s.name = kiln::tag_name((kiln::MemoryTag)t);
      s.color = kTagColor[t];
      bool nonzero = false;
      for (const json& p : r.curve) {
        if (!p.contains("mem") || !p["mem"].is_object()) continue;
        const double b = as_num(p["mem"], s.name.c_str(), 0);
        nonzero = nonzero || b > 0;
        s.pts.push_back({as_num(p, "step"), b / (1 << 20)});
      }
      if (nonzero) m.series.push_back(s);
    }
    o << render_chart(m, data);
  }
  o << "</div>";
  // The data the script reads; "</" cannot close the script element early.
  std::string d = data.dump();
  for (size_t p = d.find("</"); p != std::string::npos; p = d.find("</", p + 2)) d.replace(p, 2, "<\\/");
  o << "<script type='application/json' id=chart-data>" << d << "</script><script>" << kScript
    << "</script></body></html>\n";
  return o.str();
}

void write_run_report(const std::string& path, const std::vector<LedgerRun>& runs, const std::string& title) {
  const std::string html = render_run_report(runs, title);
  kiln::atomic_write_file(path, html.data(), html.size());
}

}  // namespace kiln_cli
