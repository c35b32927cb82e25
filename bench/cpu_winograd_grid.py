#!/usr/bin/env python3
"""Where oneDNN's Winograd convolution beats the direct one on this CPU (kiln's untuned rule for the
"onednn-winograd" tactic, nn_conv.cpp winograd_first, comes from these tables).

Builds one model of 45 independent 3x3 stride-1 convolutions (+ Relu) over a grid of channels (in =
out, 3..512) and image sizes (7..112), tunes it with `kiln build --tune -v` at 1 and 2 threads (each
layer's tactics timed on this machine, reorders included), and prints each layer's Winograd time over
the best other tactic's. Not a test.

    .venv/bin/python bench/cpu_winograd_grid.py [--kiln build/kiln] [--cpus 2,3] [--save DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def grid() -> list[tuple[int, int, int]]:
    cases = []
    for c in (3, 8, 16, 24, 32, 48, 64, 128, 256, 512):
        for h in (7, 14, 28, 56, 112):
            if 784 <= c * h * h <= 2_000_000:
                cases.append((c, max(c, 16), h))
    return cases


def grid_model(path: str) -> None:
    rng = np.random.default_rng(0)
    nodes, inits, ins, outs = [], [], [], []
    for i, (c, m, h) in enumerate(grid()):
        ins.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1, c, h, h]))
        inits += [numpy_helper.from_array((rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("Conv", [f"x{i}", f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"y{i}"], name=f"relu{i}")]
        outs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None))
    g = helper.make_graph(nodes, "winograd_grid", ins, outs, inits)
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def tune(kiln: str, model: str, threads: int, cpus: str | None) -> dict[int, dict[str, float]]:
    cmd = [kiln, "build", model, "-o", model + ".kiln", "--tune", "-v"]
    if cpus:
        cmd = ["taskset", "-c", cpus] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    times = {}
    for line in r.stderr.splitlines():
        m = re.search(r"tune node 'relu(\d+)_fused'.*\]: (.*) ->", line)
        if m:
            times[int(m.group(1))] = {t: float(ms) for t, ms in re.findall(r"([\w-]+) ([\d.]+) ms", m.group(2))}
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--cpus", help="taskset core list (e.g. 2,3)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "grid.onnx")
        grid_model(model)
        t = {n: tune(args.kiln, model, n, args.cpus) for n in (1, 2)}
    print("| channels | image | Winograd / best other, 1 thread | 2 threads |")
    print("|---:|---:|---:|---:|")
    for i, (c, m, h) in enumerate(grid()):
        cells = []
        for n in (1, 2):
            tt = t[n].get(i, {})
            if "onednn-winograd" not in tt:
                cells.append("-")
                continue
            best = min(v for k, v in tt.items() if k != "onednn-winograd")
            cells.append(f"{tt['onednn-winograd'] / best:.2f}")
        print(f"| {c}->{m} | {h}x{h} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
