#!/usr/bin/env python3
"""Expected build time of tools/gpu-check's phases on a machine with more cores, from a Ninja build's own timings.

    scripts/ninja_expected_time.py [--build DIR] [--cores 16] [--cpu-log FILE]
    (also: tools/gpu-check --expected-times ...)

For each phase (quick: what the cuda tests need; full: what the full run adds: kiln, the GPU benchmarks) it
reads each step's time from DIR/.ninja_log (the last entry of each output, wall milliseconds) and the
dependency graph from `ninja -t graph`, and prints

    expected = max(critical path, sum of step times / cores)

i.e. the time can never beat the longest chain of dependent steps nor the total work spread over all cores
(a lower bound: it assumes perfect packing). --cpu-log takes per-step CPU seconds instead ("output cpu wall"
lines, as a compiler launcher can write them) where the build machine was shared, since wall times there are
inflated by the other jobs; steps missing from it keep their wall time. Prints; changes nothing.
"""
import argparse
import os
import re
import subprocess
import sys

PHASES = [
    ("quick (cuda tests)", ["kiln_tests_cuda"]),
    ("full adds (kiln, benches)", ["kiln_cli", "bench_train_step", "bench_gpu_gemm", "bench_gpu_conv"]),
]


def read_ninja_log(path):
    """output -> seconds (the last entry of each output)."""
    times = {}
    with open(path) as f:
        first = f.readline()
        if not first.startswith("# ninja log v"):
            sys.exit(f"ninja_expected_time: {path} is not a .ninja_log (first line {first.strip()!r})")
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 4:
                continue
            start, end, out = int(parts[0]), int(parts[1]), parts[3]
            times[out] = (end - start) / 1000.0
    return times


def read_cpu_log(path):
    times = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2:
                try:
                    times[parts[0]] = float(parts[1])
                except ValueError:
                    pass
    return times


def graph(build, targets):
    """(deps: output -> set of inputs, outputs reachable from targets) from `ninja -t graph`."""
    dot = subprocess.run(["ninja", "-C", build, "-t", "graph"] + targets, capture_output=True, text=True)
    if dot.returncode != 0:
        sys.exit(f"ninja_expected_time: ninja -t graph {' '.join(targets)} failed: {dot.stderr.strip()}")
    label, is_edge = {}, set()
    node_re = re.compile(r'^"(0x[0-9a-f]+)" \[label="((?:[^"\\]|\\.)*)"(.*)\]$')
    arrow_re = re.compile(r'^"(0x[0-9a-f]+)" -> "(0x[0-9a-f]+)"')
    arrows = []
    for line in dot.stdout.splitlines():
        m = node_re.match(line)
        if m:
            label[m.group(1)] = m.group(2)
            if "shape=ellipse" in m.group(3):
                is_edge.add(m.group(1))
            continue
        m = arrow_re.match(line)
        if m:
            arrows.append((m.group(1), m.group(2)))
    # a -> b: a file into a rule node, a rule node into a file, or a file straight into a file (one-in, one-out).
    edge_in, edge_out, deps = {}, {}, {}
    for a, b in arrows:
        if b in is_edge:
            edge_in.setdefault(b, set()).add(a)
        elif a in is_edge:
            edge_out.setdefault(a, set()).add(b)
        else:
            deps.setdefault(label.get(b, b), set()).add(label.get(a, a))
    for e, outs in edge_out.items():
        for o in outs:
            deps.setdefault(label.get(o, o), set()).update(label.get(i, i) for i in edge_in.get(e, ()))
    return deps


def phase_numbers(deps, times, done):
    """Sum and critical path (seconds) of the steps not in `done`; done steps count 0."""
    memo = {}

    def finish(out, stack=()):
        if out in memo:
            return memo[out]
        if out in stack:  # a cycle cannot happen in a valid build; guard anyway
            return 0.0
        own = 0.0 if out in done else times.get(out, 0.0)
        best = max((finish(i, stack + (out,)) for i in deps.get(out, ())), default=0.0)
        memo[out] = own + best
        return memo[out]

    outputs = [o for o in deps if o in times and o not in done]
    total = sum(times[o] for o in outputs)
    crit = max((finish(o) for o in deps), default=0.0)
    return len(outputs), total, crit


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build-gpu", help="the Ninja build folder (default build-gpu)")
    ap.add_argument("--cores", type=int, default=16)
    ap.add_argument("--cpu-log", help="per-step CPU seconds: lines 'output cpu_seconds [wall]'")
    a = ap.parse_args()
    log = os.path.join(a.build, ".ninja_log")
    if not os.path.exists(log):
        sys.exit(f"ninja_expected_time: {log} not found (configure with -G Ninja and build first)")
    times = read_ninja_log(log)
    if a.cpu_log:
        times.update({k: v for k, v in read_cpu_log(a.cpu_log).items() if k in times})
    done = set()
    print(f"expected build time on {a.cores} cores = max(critical path, sum / {a.cores}), from {log}"
          + (f" with CPU seconds from {a.cpu_log}" if a.cpu_log else ""))
    print(f"{'phase':28} {'steps':>5} {'sum s':>8} {'critical s':>10} {'sum/cores':>9} {'expected s':>10}")
    for name, targets in PHASES:
        deps = graph(a.build, targets)
        n, total, crit = phase_numbers(deps, times, done)
        print(f"{name:28} {n:5d} {total:8.1f} {crit:10.1f} {total / a.cores:9.1f} {max(crit, total / a.cores):10.1f}")
        done.update(deps.keys())
        for ins in deps.values():
            done.update(ins)


if __name__ == "__main__":
    main()
