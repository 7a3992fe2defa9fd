#!/usr/bin/python3
"""Regenerates the tables of docs/segmentation-memory.md: the UNet 2048x2048 case study.

Part 1 (seconds): every row predicted by `kiln mem` on the meta device for a 16 GB CUDA card.
Part 2 (--measure, minutes on 2 cores): the same remedies on this machine's CPU at 512x512, where they fit,
each trained for one step by `kiln train` (its own measured peak beside its prediction).

Usage: scripts/segmentation_case_study.py [--build build] [--measure] [--size 512]
Prints Markdown tables (and each command) on standard output. Needs BUILD/kiln; nothing but the standard library.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

GiB = 1024 ** 3
MiB = 1024 ** 2

# (label, model, kiln flags): the case study's remedies in the order the page tells them.
ROWS = [
    ("batch 2, f32 (the starting point)", "unet", ["--batch", "2"]),
    ("batch 8, f32 (the batch the user wants)", "unet", ["--batch", "8"]),
    ("batch 8 as --accum 4 (micro-batch 2)", "unet", ["--batch", "8", "--accum", "4"]),
    ("batch 2, --amp", "unet", ["--batch", "2", "--amp"]),
    ("batch 2, stride-2 first conv", "unet:stride2", ["--batch", "2"]),
    ("batch 2, --recompute 1 (top level)", "unet", ["--batch", "2", "--recompute", "1"]),
    ("batch 2, --recompute 2", "unet", ["--batch", "2", "--recompute", "2"]),
    ("batch 2, --recompute 3", "unet", ["--batch", "2", "--recompute", "3"]),
    ("batch 2, --recompute 5 (every level)", "unet", ["--batch", "2", "--recompute", "5"]),
    ("batch 2, --amp --recompute 5", "unet", ["--batch", "2", "--amp", "--recompute", "5"]),
    ("batch 2, stride-2 + --amp", "unet:stride2", ["--batch", "2", "--amp"]),
    ("batch 2, stride-2 + --recompute 5", "unet:stride2", ["--batch", "2", "--recompute", "5"]),
    ("batch 2, stride-2 + --amp + --recompute 5", "unet:stride2", ["--batch", "2", "--amp", "--recompute", "5"]),
    ("batch 8 as --accum 4, stride-2 + --amp + --recompute 5", "unet:stride2",
     ["--batch", "8", "--accum", "4", "--amp", "--recompute", "5"]),
    ("batch 4, stride-2, --recompute auto (16G)", "unet:stride2", ["--batch", "4", "--recompute", "auto"]),
]

# Rows measured on the CPU (the --amp rows are left out: kiln's CPU autocast stages 16-bit convolutions in f32,
# which the page explains; the batch-8 row without accumulation is the same code as batch 2, four times larger).
MEASURED = [0, 2, 4, 8, 11]


def run(cmd):
    print("$ " + " ".join(cmd).replace(BUILD + "/", "build/"), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit("segmentation_case_study: failed (%d):\n%s" % (r.returncode, r.stdout[-3000:]))
    return r.stdout


def gib(b):
    return "%.2f" % (b / GiB)


def predicted_table(size, budget):
    print("\n| remedy | peak allocated (GiB) | peak reserved (GiB) | card bound (GiB) | fits %s |" % budget)
    print("| --- | --- | --- | --- | --- |")
    lines = []
    for label, model, flags in ROWS:
        out = run([KILN, "mem", "--model", model, "--task", "segment", "--image-size", str(size), "--num-classes", "2",
                   "--device", "cuda:0", "--device-memory", budget, "--json"] + flags)
        j = json.loads(out.strip().splitlines()[-1])
        cuda = j["cuda"]
        kind = " (bound)" if j["amp"] else ""
        extra = ""
        if "checkpoint_auto" in j:
            extra = " -> %d level(s)" % j["checkpoint_auto"]["chosen"]
        fits = "yes" if cuda["fits_with_bounds"] else ("allocator only" if j["fits"] else "no")
        lines.append("| %s%s | %s%s | %s | %s | %s |" % (label, extra, gib(j["peak_allocated"]), kind,
                                                       gib(j["peak_reserved"]), gib(cuda["card_total"]["bytes"]), fits))
    print("\n".join(lines))


def measured_table(size):
    tmp = tempfile.mkdtemp(prefix="kiln-seg-case-")
    data = os.path.join(tmp, "seg")
    run([KILN, "export-images", "--segmentation", data, "--count", "8", "--canvas", str(size)])
    print("\n| remedy (%dx%d, 11 classes, CPU) | predicted peak allocated (bytes) | measured (bytes) | difference | "
          "predicted / measured peak reserved (bytes) | run time (s) |" % (size, size))
    print("| --- | --- | --- | --- | --- | --- |")
    lines = []
    for i in MEASURED:
        label, model, flags = ROWS[i]
        steps = 1
        batch = int(flags[flags.index("--batch") + 1])
        t0 = time.time()
        run([KILN, "train", "--task", "segment", "--model", model, "--data", data, "--epochs", "1",
                   "--limit", str(batch * steps), "--threads", "2", "--out", os.path.join(tmp, "out%d" % i),
                   "--lr", "0.001"] + flags)
        dt = time.time() - t0
        with open(os.path.join(tmp, "out%d" % i, "runs.jsonl")) as f:
            mem = json.loads(f.read().strip().splitlines()[-1])["memory"]
        pred, meas = mem["predicted"], mem["measured_epochs"][0]
        pa, ma = pred["peak_allocated"], meas["measured_peak_allocated"]
        lines.append("| %s | %d | %d | %+.4f%% | %d / %d | %.0f |" % (
            label, pa, ma, 100.0 * (ma - pa) / pa, pred["peak_reserved"], meas["measured_peak_reserved"], dt))
    print("\n".join(lines))
    print("\n(run time: the whole `kiln train` command, one optimizer step plus validation of 1-2 images, "
          "on a 2-core machine shared with other work; the measured peak is the CPU allocator's, from the run's "
          "runs.jsonl)")
    shutil.rmtree(tmp)


def main():
    global KILN, BUILD
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--measure", action="store_true")
    ap.add_argument("--size", type=int, default=512)
    a = ap.parse_args()
    BUILD = os.path.abspath(a.build)
    KILN = os.path.join(BUILD, "kiln")
    if not os.access(KILN, os.X_OK):
        sys.exit("segmentation_case_study: %s not built (cmake --build %s --target kiln_cli)" % (KILN, a.build))
    print("## predicted: UNet (depth 4, base 64) 2048x2048, 2 classes, SGD, cuda:0 with 16 GiB")
    predicted_table(2048, "16G")
    if a.measure:
        print("\n## measured on this CPU at %dx%d" % (a.size, a.size))
        measured_table(a.size)


if __name__ == "__main__":
    main()
