#!/usr/bin/env python3
"""tests/onnx/check_ort.py MANIFEST.json: checks ONNX files written by v100.onnx.export against
v100lua's own outputs, for tests/lua/test_onnx.lua.

The manifest lists cases: {"name", "model" (an .onnx file), "data" (a safetensors file holding
the inputs "in.<input name>" and v100lua's outputs "out.<output name>"), "rtol", "atol",
"ort" (false: check the file only)}. For each case:
  1. onnx.checker.check_model(full_check=True): the schema, the opset's operator definitions
     and shape inference over the whole graph;
  2. an onnxruntime CPU session runs the inputs (whose batch and sequence sizes differ from the
     export's example: the dynamic axes are exercised) and every output must match v100lua's
     within |ort - ours| <= atol + rtol * |ours|, elementwise.
Prints one line per case and "N passed, N failed"; exits 1 on any failure, 2 when the packages
are missing (the caller decides whether that is a skip).
The safetensors files are read with numpy alone (8-byte header length, JSON header, raw data),
so the check needs only onnx, onnxruntime and numpy.
"""
import json
import struct
import sys

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
except ImportError as e:  # the caller prints the skip or failure
    print(f"check_ort.py: missing Python package: {e}")
    sys.exit(2)

DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64,
          "I32": np.int32, "U8": np.uint8, "BOOL": np.bool_}


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        arr = np.frombuffer(raw[base + b:base + end], dtype=DTYPES[e["dtype"]])
        out[name] = arr.reshape(e["shape"])
    return out


def check_case(case):
    model = onnx.load(case["model"])
    onnx.checker.check_model(model, full_check=True)
    if not case.get("ort", True):
        return "checker only"
    data = read_safetensors(case["data"])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(case["model"], so, providers=["CPUExecutionProvider"])
    feeds = {}
    for i in sess.get_inputs():
        key = "in." + i.name
        if key not in data:
            raise AssertionError(f"the data has no input {i.name}")
        feeds[i.name] = data[key]
    names = [o.name for o in sess.get_outputs()]
    results = sess.run(names, feeds)
    worst = []
    for name, got in zip(names, results):
        want = data["out." + name]
        if got.shape != want.shape:
            raise AssertionError(f"output {name}: onnxruntime shape {got.shape}, v100lua {want.shape}")
        g, w = got.astype(np.float64), want.astype(np.float64)
        err = np.abs(g - w)
        bound = case["atol"] + case["rtol"] * np.abs(w)
        if not np.all(np.isfinite(g)):
            raise AssertionError(f"output {name}: onnxruntime gave non-finite values")
        bad = err > bound
        if bad.any():
            i = np.unravel_index(np.argmax(err - bound), err.shape)
            raise AssertionError(
                f"output {name} {tuple(got.shape)}: {int(bad.sum())} elements beyond atol {case['atol']:g} + "
                f"rtol {case['rtol']:g}; worst at {tuple(int(k) for k in i)}: onnxruntime {g[i]:.9g}, "
                f"v100lua {w[i]:.9g}")
        worst.append(f"{name} {tuple(got.shape)} max abs err {err.max():.3g}")
    return "; ".join(worst)


def main():
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    print(f"onnx {onnx.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}")
    passed = failed = 0
    for case in cases:
        try:
            what = check_case(case)
            print(f"ok   {case['name']}: {what}")
            passed += 1
        except Exception as e:  # report every case, then fail
            print(f"FAIL {case['name']}: {type(e).__name__}: {e}")
            failed += 1
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
