"""onnxruntime oracle for kiln's ONNX export test (tests/parity/test_onnx_export.cpp). A test oracle only;
kiln never depends on it. Runs in the pinned virtual environment that scripts/setup.sh --test creates
(onnx, onnxruntime and numpy from pip; never Debian's /usr/bin/python3, whose numpy torch uses).

Usage:  VENV/bin/python tests/support/oracle/onnx_check.py SPEC.json

SPEC: {"cases": [{"name": ..., "onnx": "m.onnx", "x": "x.npy" (N,C,H,W f32, N >= 2),
                  "logits": "logits.npy" (kiln's eval-mode logits of x), "opset": 17,
                  "metadata": {key: value, ...} (expected metadata_props, exactly)}]}
Relative paths are relative to SPEC's folder. For each case it checks, and exits 1 naming the first
failure (after printing every case's numbers):
  - onnx.checker.check_model(full_check=True) accepts the file; the opset import is the one asked for;
  - input 'input' (N, C, H, W) and output 'logits' (N, K) (or (N, K, H, W): a UNet) are f32 with a symbolic batch dimension;
  - metadata_props equal the expected map;
  - onnxruntime's logits equal kiln's, |ort - kiln| <= tol * (1 + |kiln|) elementwise, with
    graph optimizations off (ORT_DISABLE_ALL, tol 1e-5) and all on (ORT_ENABLE_ALL, tol 1e-4: it folds
    batch norm into the convolutions), at batch N and at batch 1 (the first sample).
Prints one JSON line per case with the worst error of each run.
"""
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort

TOL = {"disable_all": 1e-5, "enable_all": 1e-4}
LEVEL = {"disable_all": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
         "enable_all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}


def dims(value_info):
    out = []
    for d in value_info.type.tensor_type.shape.dim:
        out.append(d.dim_param if d.HasField("dim_param") else d.dim_value)
    return out


def check_case(case, base):
    path = os.path.join(base, case["onnx"])
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    problems = []
    opsets = {o.domain: o.version for o in model.opset_import}
    if opsets.get("", None) != case["opset"]:
        problems.append(f"opset import {opsets}, expected {case['opset']}")
    g = model.graph
    if [i.name for i in g.input] != ["input"] or [o.name for o in g.output] != ["logits"]:
        problems.append(f"inputs {[i.name for i in g.input]} outputs {[o.name for o in g.output]}")
    x = np.load(os.path.join(base, case["x"]))
    ref = np.load(os.path.join(base, case["logits"]))
    din, dout = dims(g.input[0]), dims(g.output[0])
    if din != ["N"] + list(x.shape[1:]) or dout != ["N"] + list(ref.shape[1:]):
        problems.append(f"input dims {din}, output dims {dout}; x {x.shape}, logits {ref.shape}")
    for v in list(g.input) + list(g.output):
        if v.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
            problems.append(f"{v.name} is not f32")
    meta = {p.key: p.value for p in model.metadata_props}
    if meta != case["metadata"]:
        problems.append(f"metadata_props {meta}, expected {case['metadata']}")
    if any(n.op_type == "Dropout" for n in g.node):
        problems.append("a Dropout node in the inference graph")

    result = {"name": case["name"], "nodes": len(g.node), "ort": ort.__version__, "onnx": onnx.__version__}
    for key, level in LEVEL.items():
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        for batch in (x.shape[0], 1):
            got = sess.run(["logits"], {"input": x[:batch]})[0]
            want = ref[:batch]
            if got.shape != want.shape:
                problems.append(f"{key} batch {batch}: logits {got.shape}, kiln {want.shape}")
                continue
            err = float(np.max(np.abs(got.astype(np.float64) - want) / (1.0 + np.abs(want.astype(np.float64)))))
            abs_err = float(np.max(np.abs(got.astype(np.float64) - want)))
            result[f"{key}_b{batch}"] = err
            result[f"{key}_b{batch}_abs"] = abs_err
            if not np.all(np.isfinite(got)) or not err <= TOL[key]:
                problems.append(f"{key} batch {batch}: error {err:.3g} > {TOL[key]:g} (max |kiln| "
                                f"{float(np.max(np.abs(want))):.3g})")
    result["max_abs_logit"] = float(np.max(np.abs(ref)))
    print(json.dumps(result), flush=True)
    return problems


def main():
    spec_path = sys.argv[1]
    base = os.path.dirname(os.path.abspath(spec_path))
    with open(spec_path) as f:
        spec = json.load(f)
    failed = []
    for case in spec["cases"]:
        for p in check_case(case, base):
            failed.append(f"{case['name']}: {p}")
    if failed:
        for line in failed:
            print("FAIL " + line, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
