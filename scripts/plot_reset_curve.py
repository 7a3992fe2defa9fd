#!/usr/bin/env python3
"""Draws the loss curves of bench/rules_reset_parameters (its --csv) as a self-contained SVG, by
hand (no plotting library is installed here): training loss per step, averaged over 25 steps, one
line per run, with the validation accuracy at each evaluation point written beside the curve and
the reset steps marked. Usage: plot_reset_curve.py RUN.csv OUT.svg"""
import csv
import sys
from collections import OrderedDict

W, H = 760, 380
L, R, T, B = 60, 20, 30, 50
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
WINDOW = 25


def main():
    src, out = sys.argv[1], sys.argv[2]
    loss, acc = OrderedDict(), OrderedDict()
    with open(src) as f:
        for row in csv.DictReader(f):
            run, step = row["run"], int(row["step"])
            if row["loss"]:
                loss.setdefault(run, []).append((step, float(row["loss"])))
            if row["val_accuracy"]:
                acc.setdefault(run, []).append((step, float(row["val_accuracy"])))
    smooth = {}
    for run, pts in loss.items():
        s = []
        for i in range(WINDOW - 1, len(pts)):
            s.append((pts[i][0], sum(v for _, v in pts[i - WINDOW + 1:i + 1]) / WINDOW))
        smooth[run] = s
    max_step = max(p[0] for pts in loss.values() for p in pts)
    ymax = max(v for s in smooth.values() for _, v in s) * 1.05
    x = lambda s: L + (W - L - R) * s / max_step
    y = lambda v: T + (H - T - B) * (1 - v / ymax)
    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">' % (W, H),
         '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="18" font-size="14">small_cnn, Fashion-MNIST, AdamW: training loss (mean of %d steps), '
         'identical runs until the reset</text>' % (L, WINDOW)]
    o.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, H - B, W - R, H - B))
    o.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, T, L, H - B))
    step_tick = 250
    for s in range(0, max_step + 1, step_tick):
        o.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black"/>' % (x(s), H - B, x(s), H - B + 4))
        o.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (x(s), H - B + 18, s))
    o.append('<text x="%d" y="%d" text-anchor="middle">optimizer step</text>' % ((L + W - R) // 2, H - 10))
    v = 0.0
    while v <= ymax:
        o.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (L, y(v), W - R, y(v)))
        o.append('<text x="%d" y="%.1f" text-anchor="end">%.2f</text>' % (L - 6, y(v) + 4, v))
        v += 0.25
    # The later runs first, so the first (plain) run is drawn on top where the curves coincide.
    for i, (run, s) in reversed(list(enumerate(smooth.items()))):
        c = COLORS[i % len(COLORS)]
        pts = " ".join("%.1f,%.1f" % (x(a), y(b)) for a, b in s)
        o.append('<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>' % (c, pts))
        o.append('<text x="%d" y="%d" fill="%s">%s</text>' % (W - R - 250, T + 20 + 16 * i, c, run))
        last = {}
        for st, a in acc.get(run, []):
            last[st] = a  # the reset run logs twice at a reset step: after the step, after the reset
        for st, a in acc.get(run, []):
            near = min(s, key=lambda p: abs(p[0] - st)) if s else (st, 0)
            o.append('<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>' % (x(st), y(near[1]), c))
        if "reset" in run:
            seen = set()
            for st, _ in acc.get(run, []):
                if st in seen:
                    o.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-dasharray="4,3"/>'
                             % (x(st), T, x(st), H - B, c))
                    o.append('<text x="%.1f" y="%d" fill="%s">reset</text>' % (x(st) + 4, T + 12, c))
                seen.add(st)
        finals = acc.get(run, [])
        if finals:
            o.append('<text x="%d" y="%d" fill="%s">val accuracy at step %d: %.2f%%</text>'
                     % (W - R - 250, T + 52 + 16 * i, c, finals[-1][0], 100 * finals[-1][1]))
    o.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(o) + "\n")


if __name__ == "__main__":
    main()
