// HTML memory report (see memory_report.h). Everything is drawn here as SVG from numbers; the
// page's only script shows the bytes under the mouse on the timeline.
#include "tools/report/memory_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"

namespace kiln {

namespace {

// Tag colours, in MemoryTag order: param, grad, optimizer, activation, temporary, data, other,
// param_f16 (the per-step f16 weight copies of --amp).
const char* const kTagColor[] = {"#4e79a7", "#f28e2b", "#b07aa1", "#e15759",
                                 "#76b7b2", "#59a14f", "#9c9c9c", "#edc948"};
static_assert(sizeof(kTagColor) / sizeof(kTagColor[0]) == kNumMemoryTags, "one colour per memory tag");

std::string human(int64_t b) {
  char buf[48];
  const double a = (double)(b < 0 ? -b : b);
  if (a >= (double)(int64_t(1) << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", (double)b / (1 << 30));
  else if (a >= (double)(1 << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", (double)b / (1 << 20));
  else if (a >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", (double)b / 1024);
  else std::snprintf(buf, sizeof buf, "%lld B", (long long)b);
  return buf;
}

std::string esc(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '<') o += "&lt;";
    else if (ch == '>') o += "&gt;";
    else if (ch == '&') o += "&amp;";
    else if (ch == '"') o += "&quot;";
    else o += ch;
  }
  return o;
}

std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

// Stacked areas of the timeline, x = event number (uniform: a meta run has no meaningful time).
void timeline_svg(std::ostringstream& o, const std::vector<TimelinePoint>& pts) {
  const double W = 1100, H = 320, L = 70, B = 24;
  if (pts.empty()) {
    o << "<p class=note>No allocator events were recorded for this step.</p>\n";
    return;
  }
  // At most ~1200 columns: keep the point with the highest total in each bucket (peaks survive).
  std::vector<TimelinePoint> v;
  const size_t bucket = std::max<size_t>(1, pts.size() / 1200);
  for (size_t i = 0; i < pts.size(); i += bucket) {
    size_t best = i;
    int64_t best_total = -1;
    for (size_t j = i; j < std::min(pts.size(), i + bucket); ++j) {
      int64_t t = 0;
      for (int k = 0; k < kNumMemoryTags; ++k) t += pts[j].bytes[k];
      if (t > best_total) best_total = t, best = j;
    }
    v.push_back(pts[best]);
  }
  int64_t ymax = 1;
  for (const auto& p : v) {
    int64_t t = 0;
    for (int k = 0; k < kNumMemoryTags; ++k) t += p.bytes[k];
    ymax = std::max(ymax, t);
  }
  const double xs = (W - L - 10) / (double)std::max<size_t>(1, v.size() - 1), ys = (H - B - 10) / (double)ymax;
  o << "<svg id=timeline width=" << W << " height=" << H << " viewBox='0 0 " << W << " " << H
    << "' xmlns='http://www.w3.org/2000/svg'>\n";
  for (int g = 0; g <= 4; ++g) {
    const double y = H - B - g * (H - B - 10) / 4;
    o << "<line x1=" << L << " x2=" << W - 10 << " y1=" << fmt(y) << " y2=" << fmt(y) << " class=grid />"
      << "<text x=" << L - 4 << " y=" << fmt(y + 4) << " class=axis text-anchor=end>" << human(ymax * g / 4)
      << "</text>\n";
  }
  std::vector<double> base(v.size(), 0.0);
  for (int k = 0; k < kNumMemoryTags; ++k) {
    std::string top, bottom;
    bool any = false;
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i].bytes[k] > 0) any = true;
      top += fmt(L + i * xs) + "," + fmt(H - B - (base[i] + (double)v[i].bytes[k]) * ys) + " ";
    }
    for (size_t i = v.size(); i-- > 0;) bottom += fmt(L + i * xs) + "," + fmt(H - B - base[i] * ys) + " ";
    for (size_t i = 0; i < v.size(); ++i) base[i] += (double)v[i].bytes[k];
    if (any)
      o << "<polygon class=area points='" << top << bottom << "' fill='" << kTagColor[k] << "'><title>"
        << tag_name((MemoryTag)k) << "</title></polygon>\n";
  }
  o << "<text x=" << W / 2 << " y=" << H - 4 << " class=axis text-anchor=middle>allocator events over one step ("
    << pts.size() << " events)</text>\n<line id=cursor x1=0 x2=0 y1=10 y2=" << H - B << " class=cursor />\n</svg>\n";
  // Data for the hover read-out: per column, bytes per tag.
  o << "<script>const TL={L:" << L << ",xs:" << xs << ",pts:[";
  for (size_t i = 0; i < v.size(); ++i) {
    o << (i ? "," : "") << "[";
    for (int k = 0; k < kNumMemoryTags; ++k) o << (k ? "," : "") << v[i].bytes[k];
    o << "]";
  }
  o << "]};</script>\n<div id=readout class=note>Move the mouse over the timeline.</div>\n";
}

void segment_map_svg(std::ostringstream& o, const std::vector<SegmentInfo>& segs) {
  if (segs.empty()) {
    o << "<p class=note>No segment map (the peak was not captured).</p>\n";
    return;
  }
  const double W = 1100, row = 18, L = 150;
  size_t largest = 1;
  for (const auto& s : segs) largest = std::max(largest, s.size);
  o << "<svg id=segments width=" << W << " height=" << (double)segs.size() * row + 10
    << " xmlns='http://www.w3.org/2000/svg'>\n";
  for (size_t i = 0; i < segs.size(); ++i) {
    const SegmentInfo& s = segs[i];
    const double y = 5 + (double)i * row, scale = (W - L - 10) / (double)largest;
    o << "<text x=" << L - 6 << " y=" << fmt(y + 12) << " class=axis text-anchor=end>" << pool_name(s.pool) << " "
      << human((int64_t)s.size) << "</text>";
    o << "<rect x=" << L << " y=" << fmt(y) << " width=" << fmt((double)s.size * scale) << " height=" << row - 3
      << " class=seg />";
    for (const BlockInfo& b : s.blocks) {
      if (b.state == "free") continue;
      o << "<rect x=" << fmt(L + (double)b.offset * scale) << " y=" << fmt(y)
        << " width=" << fmt(std::max(0.5, (double)b.size * scale)) << " height=" << row - 3 << " fill='"
        << kTagColor[(int)b.tag] << "'><title>" << tag_name(b.tag) << " " << human((int64_t)b.size) << " "
        << esc(b.module) << "</title></rect>";
    }
    o << "\n";
  }
  o << "</svg>\n";
}

}  // namespace

std::vector<TimelinePoint> timeline_from_trace(const nlohmann::json& trace) {
  std::vector<TimelinePoint> out;
  if (!trace.is_object() || !trace.contains("traceEvents")) return out;
  TimelinePoint cur;
  bool started = false;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("ph", "") != "C") continue;
    const std::string name = e.value("name", "");
    for (int t = 0; t < kNumMemoryTags; ++t) {
      if (name != std::string(tag_name((MemoryTag)t)) + " bytes") continue;
      cur.bytes[t] = e["args"].value("bytes", (int64_t)0);
      cur.ts_us = e.value("ts", 0.0);
      // The first kNumMemoryTags counters give the starting levels: one point after all of them.
      if (started || t == kNumMemoryTags - 1) {
        out.push_back(cur);
        started = true;
      }
    }
  }
  return out;
}

std::string render_memory_report(const MemPrediction& p, const MemMeasured& m) {
  std::ostringstream o;
  const RunConfig& t = p.config.train;
  o << "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>kiln memory report: " << esc(t.model)
    << "</title>\n<style>\nbody{font:14px/1.4 sans-serif;margin:24px;color:#222;background:#fff}\n"
       "h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}\n"
       "table{border-collapse:collapse}td,th{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}\n"
       "td:first-child,th:first-child{text-align:left}.bar{background:#e15759;height:10px}\n"
       ".grid{stroke:#e5e5e5}.axis{font-size:11px;fill:#555}.cursor{stroke:#000;stroke-width:1}\n"
       ".seg{fill:#f3f3f3;stroke:#bbb}.note{color:#666}.key span{display:inline-block;width:12px;height:12px;"
       "margin:0 4px 0 12px;vertical-align:middle}\n</style></head><body>\n";
  o << "<h1>kiln memory report</h1>\n<p id=config>" << esc(t.model) << ", batch " << t.batch << " (accum "
    << t.accum << "), " << p.config.in_channels << "x" << p.config.image_size << "x" << p.config.image_size << ", "
    << esc(t.optimizer) << ", checkpoint " << (p.config.recompute > 0 ? std::to_string(p.config.recompute) : "off")
    << ", device " << esc(p.target) << "</p>\n";

  o << "<h2 id=accounts>Predicted vs measured</h2>\n<table><tr><th>account</th><th>predicted</th>"
    << (m.present ? "<th>measured (" + esc(m.when) + ")</th><th>error</th>" : "") << "</tr>\n";
  auto row = [&](const std::string& name, int64_t pred, int64_t meas, bool has_meas) {
    o << "<tr><td>" << name << "</td><td title='" << pred << " B'>" << human(pred) << "</td>";
    if (m.present) {
      if (has_meas) {
        char e[32];
        std::snprintf(e, sizeof e, "%+.2f%%", meas ? 100.0 * (double)(pred - meas) / (double)meas : 0.0);
        o << "<td title='" << meas << " B'>" << human(meas) << "</td><td>" << e << "</td>";
      } else {
        o << "<td></td><td></td>";
      }
    }
    o << "</tr>\n";
  };
  const StepPeak& pk = m.when == "first step" ? p.first : (p.first.allocated >= p.steady.allocated ? p.first : p.steady);
  row("peak allocated", m.when == "first step" ? p.first.allocated : p.peak_allocated, m.peak_allocated, true);
  row("peak reserved", m.when == "first step" ? p.first.reserved : p.peak_reserved, m.peak_reserved, true);
  for (int k = 0; k < kNumMemoryTags; ++k)
    row(std::string("peak ") + tag_name((MemoryTag)k), pk.tag_peak[k], m.tag_peak[k], true);
  o << "</table>\n<table style='margin-top:12px'><tr><th>account (predicted)</th><th>bytes</th></tr>\n";
  const std::pair<const char*, int64_t> acc[] = {{"parameters", p.params},
                                                 {"gradients", p.grads},
                                                 {"optimizer state", p.optimizer},
                                                 {"activations saved (end of forward)", p.activations},
                                                 {"temporaries at the peak", p.temporaries_at_peak},
                                                 {"input data", p.data},
                                                 {"allocator slack (reserved - allocated)", p.slack}};
  for (const auto& [n, b] : acc) o << "<tr><td>" << n << "</td><td title='" << b << " B'>" << human(b) << "</td></tr>\n";
  o << "</table>\n";

  o << "<h2 id=timeline-h>Live bytes by tag over one step</h2>\n<div class=key>";
  for (int k = 0; k < kNumMemoryTags; ++k)
    o << "<span style='background:" << kTagColor[k] << "'></span>" << tag_name((MemoryTag)k);
  o << "</div>\n";
  timeline_svg(o, timeline_from_trace(m.present && !m.trace.is_null() ? m.trace : p.trace));
  o << "<p class=note>" << (m.present && !m.trace.is_null() ? "Measured" : "Predicted (meta run)")
    << " allocator trace.</p>\n";

  o << "<h2 id=layers>Activations saved for backward, per layer</h2>\n<table><tr><th>module</th><th>bytes</th><th>"
       "share</th><th></th></tr>\n";
  int64_t maxb = 1;
  for (const auto& [n, b] : p.layer_activations) maxb = std::max(maxb, b);
  for (const auto& [n, b] : p.layer_activations) {
    char share[16];
    std::snprintf(share, sizeof share, "%.1f%%", p.activations ? 100.0 * (double)b / (double)p.activations : 0.0);
    o << "<tr><td>" << esc(n) << "</td><td title='" << b << " B'>" << human(b) << "</td><td>" << share
      << "</td><td><div class=bar style='width:" << fmt(300.0 * (double)b / (double)maxb) << "px'></div></td></tr>\n";
  }
  o << "<tr><th>total</th><th>" << human(p.activations) << "</th><th></th><th></th></tr></table>\n";

  o << "<h2 id=segmap>Allocator segments at the peak (predicted)</h2>\n";
  segment_map_svg(o, p.segments_at_peak);

  o << "<script>\n(function(){const s=document.getElementById('timeline'),r=document.getElementById('readout'),"
       "c=document.getElementById('cursor');if(!s||typeof TL==='undefined')return;\n"
       "const names=['param','grad','optimizer','activation','temporary','data','other'];\n"
       "function h(b){return b>=1048576?(b/1048576).toFixed(2)+' MiB':(b/1024).toFixed(1)+' KiB';}\n"
       "s.addEventListener('mousemove',function(e){const x=e.clientX-s.getBoundingClientRect().left;"
       "const i=Math.max(0,Math.min(TL.pts.length-1,Math.round((x-TL.L)/TL.xs)));const p=TL.pts[i];"
       "c.setAttribute('x1',TL.L+i*TL.xs);c.setAttribute('x2',TL.L+i*TL.xs);let t=0,parts=[];"
       "for(let k=0;k<p.length;k++){t+=p[k];if(p[k])parts.push(names[k]+' '+h(p[k]));}"
       "r.textContent='total '+h(t)+': '+parts.join(', ');});})();\n</script>\n";
  o << "</body></html>\n";
  // A failed insertion (e.g. a null string) sets badbit and silently drops the rest of the page.
  KILN_CHECK(o.good(), "memory report: rendering the page failed");
  return o.str();
}

void write_memory_report(const std::string& path, const MemPrediction& p, const MemMeasured& m) {
  const std::string html = render_memory_report(p, m);
  atomic_write_file(path, html.data(), html.size());
}

}  // namespace kiln
