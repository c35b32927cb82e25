#!/usr/bin/env python3
"""kiln's INT8 layers on a CPU without VNNI: the exact kernels (cpu.QConv.i8.exact,
cpu.QMatMul.i8.exact) against what such a CPU ran before they existed (the QDQ graph unfused:
DequantizeLinear, the float op, QuantizeLinear; kiln at opt level 0), against ONNX Runtime on the
same QDQ model, and against oneDNN's VNNI kernels where the machine has them. One QDQ layer per
model, of real models' sizes (ResNet's 3x3 and 1x1 convolutions, MobileNet's depthwise one, BERT's
FFN product), batch 1, medians of blocks of runs (A B C C B A) in one process per CPU setting:

  native: what this CPU runs (oneDNN's VNNI kernels when it has them)
  avx2:   KILN_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2, an AVX2 machine without VNNI (the exact kernels)

    .venv/bin/python bench/int8_exact_cpu.py --threads 2 --out bench/results/int8_exact_cpu_<date>.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_bench  # noqa: E402

LAYERS = {
    # name: (kind, x shape, weight shape, group)
    "conv3x3_64_56": ("conv", (1, 64, 56, 56), (64, 64, 3, 3), 1),
    "conv1x1_256_64_56": ("conv", (1, 256, 56, 56), (64, 256, 1, 1), 1),
    "dwconv3x3_144_56": ("conv", (1, 144, 56, 56), (144, 1, 3, 3), 144),
    "matmul_128x768x3072": ("matmul", (128, 768), (768, 3072), 1),
}


def qdq_layer(kind, xshape, wshape, group, rng):
    """x → Q → DQ → Conv/MatMul(DQ(W int8 per channel)) + bias → Relu → Q → DQ → y."""
    from onnx import TensorProto, helper, numpy_helper  # noqa: PLC0415

    c = lambda n, a: numpy_helper.from_array(np.asarray(a), n)  # noqa: E731
    channels = wshape[0] if kind == "conv" else wshape[1]
    axis = 0 if kind == "conv" else 1
    w = rng.integers(-127, 128, size=wshape).astype(np.int8)
    ws = rng.uniform(0.002, 0.02, size=channels).astype(np.float32)
    inits = [c("xs", np.float32(0.03)), c("xz", np.uint8(128)), c("w", w), c("ws", ws), c("wz", np.zeros(channels, np.int8)),
             c("b", rng.standard_normal(channels).astype(np.float32)), c("ys", np.float32(0.1)), c("yz", np.uint8(0))]
    n = helper.make_node
    nodes = [n("QuantizeLinear", ["x", "xs", "xz"], ["xq"]), n("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             n("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=axis)]
    if kind == "conv":
        k = wshape[2]
        nodes.append(n("Conv", ["xd", "wd", "b"], ["p"], kernel_shape=[k, k], pads=[k // 2] * 4, group=group))
    else:
        nodes += [n("MatMul", ["xd", "wd"], ["p0"]), n("Add", ["p0", "b"], ["p"])]
    nodes += [n("Relu", ["p"], ["a"]), n("QuantizeLinear", ["a", "ys", "yz"], ["yq"]), n("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(xshape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def child(threads: int, runs: int) -> dict:
    """Times every layer in this process (its CPU caps come from the environment)."""
    import kiln  # noqa: PLC0415
    import onnxruntime as ort  # noqa: PLC0415

    rng = np.random.default_rng(0)
    out = {}
    for name, (kind, xshape, wshape, group) in LAYERS.items():
        m = qdq_layer(kind, xshape, wshape, group, rng).SerializeToString()
        x = rng.standard_normal(xshape).astype(np.float32)
        fused = kiln.Engine.build_from_bytes(m, opt_level=1)
        rows = sorted({line.split("-> ")[1].split()[0] for line in fused.placement_report().splitlines()
                       if "(QConv)" in line or "(QMatMul)" in line})
        sessions = {"kiln fused": fused.create_context(), "kiln unfused (opt 0)": kiln.Engine.build_from_bytes(m, opt_level=0).create_context()}
        for s in sessions.values():
            s.set_num_threads(threads)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        o = ort.InferenceSession(m, so, providers=["CPUExecutionProvider"])
        fns = {k: (lambda s=s: s.run({"x": x})[0]) for k, s in sessions.items()}
        fns["onnxruntime"] = lambda: o.run(None, {"x": x})[0]
        want = fns["onnxruntime"]()
        steps = {k: float(np.abs(f() - want).max() / 0.1) for k, f in fns.items()}  # in quantization steps
        # Blocks of runs per engine, alternating A B C C B A: per-call interleaving made OpenMP's and ONNX
        # Runtime's thread pools wake each other (kiln's layers read 5x slower than alone).
        times = {k: [] for k in fns}
        order = list(fns) + list(fns)[::-1]
        for k in order:
            f = fns[k]
            for _ in range(3):
                f()
            for _ in range(runs):
                t = time.perf_counter()
                f()
                times[k].append((time.perf_counter() - t) * 1e3)
        out[name] = {"rows": rows, "median_ms": {k: float(np.median(v)) for k, v in times.items()},
                     "max_steps_vs_ort": steps}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--out", default="")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.threads, a.runs)))
        return 0
    settings = {"native": {}, "avx2": {"KILN_CPU_ISA": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}}
    result = {"meta": {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": cpu_bench.machine_info(),
                       "versions": cpu_bench.versions()},
              "threads": a.threads, "runs": a.runs, "settings": {}}
    for name, env in settings.items():
        r = subprocess.run([sys.executable, __file__, "--child", "--threads", str(a.threads), "--runs", str(a.runs)],
                           env=dict(os.environ, **env), capture_output=True, text=True, check=True)
        result["settings"][name] = {"env": env, "layers": json.loads(r.stdout.strip().splitlines()[-1])}
    print(f"{'setting':8} {'layer':22} {'row':24} {'fused':>9} {'unfused':>9} {'ORT':>9}  max steps vs ORT")
    for sname, s in result["settings"].items():
        for lname, l in s["layers"].items():
            t = l["median_ms"]
            print(f"{sname:8} {lname:22} {','.join(l['rows']):24} {t['kiln fused']:8.3f}m {t['kiln unfused (opt 0)']:8.3f}m "
                  f"{t['onnxruntime']:8.3f}m  {l['max_steps_vs_ort']['kiln fused']:.0f}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
