#!/usr/bin/env python3
"""com.microsoft MatMulNBits (4-bit weights) on the CPU, kiln and ONNX Runtime side by side in one process.

Each case is one MatMulNBits node made by ONNX Runtime's own MatMulNBitsQuantizer from a float MatMul
with random weights [K, N] (an MLP's up- and down-projection shapes; block size 32 or 128, symmetric or
with zero points), fed A [M, K] for each M; and a 4-bit decoder MLP (SiLU-gated up-projection and down-projection, quantized the same way).
Both runtimes get the same model bytes, the same inputs and the same number of threads, and run
alternating (ABBA) after a warm-up; the figures are medians. The result (with the CPU model and its ISA)
goes to bench/results/cpu_matmulnbits_<date>.json (KILN_CPU_ISA=avx2 in the environment times kiln's AVX2
copies on an AVX-512 machine; the JSON records it).

    .venv/bin/python bench/cpu_matmulnbits.py --threads 1,2 --rows 1,4,16,64,256
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "zoo"))

import cpu_bench  # noqa: E402

logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)


def quantize(model, block: int, symmetric: bool):
    """A 4-bit copy of `model` (the quantizer rewrites the model it is given in place)."""
    import onnx  # noqa: PLC0415
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer  # noqa: PLC0415

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    q = MatMulNBitsQuantizer(copy, block_size=block, is_symmetric=symmetric)
    q.process()
    return q.model.model


def float_model(nodes, weights: dict, hidden: int):
    from onnx import TensorProto, helper, numpy_helper  # noqa: PLC0415

    g = helper.make_graph(nodes, "nbits", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", hidden])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in weights.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def matmul_case(rng, K: int, N: int):
    from onnx import helper  # noqa: PLC0415

    w = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
    return float_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"w": w}, K)


def mlp_case(rng, hidden: int, ffn: int):
    from onnx import helper  # noqa: PLC0415

    w = lambda *s: (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32)  # noqa: E731
    nodes = [helper.make_node("MatMul", ["x", "w_gate"], ["g"]), helper.make_node("Sigmoid", ["g"], ["gs"]),
             helper.make_node("Mul", ["g", "gs"], ["silu"]), helper.make_node("MatMul", ["x", "w_up"], ["u"]),
             helper.make_node("Mul", ["silu", "u"], ["h"]), helper.make_node("MatMul", ["h", "w_down"], ["d"]),
             helper.make_node("Add", ["x", "d"], ["y"])]
    return float_model(nodes, {"w_gate": w(hidden, ffn), "w_up": w(hidden, ffn), "w_down": w(ffn, hidden)}, hidden)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rows", default="1,4,16,64,256", help="M values (rows of A)")
    ap.add_argument("--shapes", default="1024x2816,2816x1024", help="KxN of the single-node cases")
    ap.add_argument("--blocks", default="32,128")
    ap.add_argument("--mlp", default="1024x2816", help="hidden x ffn of the decoder MLP ('' for none)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--min-runs", type=int, default=20)
    ap.add_argument("--budget", type=float, default=1.0, help="seconds per pair past min-runs")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    cases = []
    for K, N in ((int(v) for v in shape.split("x")) for shape in args.shapes.split(",")):
        base = matmul_case(rng, K, N)
        for block in (int(b) for b in args.blocks.split(",")):
            for sym in (True, False):
                q = quantize(base, block, sym)
                assert [len(n.input) for n in q.graph.node] == [3 if sym else 4], "zero points iff asymmetric"
                cases.append((f"MatMulNBits K{K} N{N} block {block} {'sym' if sym else 'asym'}", K,
                              q.SerializeToString()))
    if args.mlp:
        hidden, ffn = (int(v) for v in args.mlp.split("x"))
        cases.append((f"decoder MLP {hidden}x{ffn} block 32 asym", hidden,
                      quantize(mlp_case(rng, hidden, ffn), 32, False).SerializeToString()))
    rows = [int(m) for m in args.rows.split(",")]
    results = []
    for threads in (int(t) for t in args.threads.split(",")):
        for name, k, model in cases:
            ks = cpu_bench.kiln_session(model, threads)
            os_ = cpu_bench.ort_session(model, threads, spin=False)
            for M in rows:
                feed = {"x": rng.standard_normal((M, k)).astype(np.float32)}
                got, want = ks.run(None, feed)[0], os_.run(None, feed)[0]
                err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
                kt, ot = cpu_bench.bench_pair(ks, os_, feed, args.warmup, args.min_runs, 10000, args.budget)
                results.append(cpu_bench.pair_row(f"{name:44s} t={threads} M={M:4d}",
                                                  {"case": name, "threads": threads, "M": M}, kt, ot, M, err))
    out = args.out or os.path.join(HERE, "results", f"cpu_matmulnbits_{datetime.date.today().isoformat()}.json")
    machine = cpu_bench.machine_info()
    # kiln's own cap on its copies of the hot loops (KILN_CPU_ISA: "avx2", "baseline"; unset: the CPU's)
    machine["kiln_cpu_isa"] = os.environ.get("KILN_CPU_ISA", "any")
    cpu_bench.write_side_by_side(out, args, results, machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())
