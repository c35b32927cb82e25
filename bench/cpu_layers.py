#!/usr/bin/env python3
"""kiln vs ONNX Runtime per node, side by side: where a CPU model's time goes in each runtime.

Both sessions (same model, inputs and thread count; ORT_ENABLE_ALL, spinning off) run alternately in
one process with their own per-node profiling on (kiln SessionOptions.enable_profiling, ORT
enable_profiling). Prints each runtime's median time per op type and per node, in execution order,
the two lists next to each other (the runtimes fuse differently, so rows pair up by position, not by
name), and the totals. Not a test; bench/cpu_bench.py gives the end-to-end ratios.

    PYTHONPATH=python .venv/bin/python bench/cpu_layers.py resnet50 --threads 2 --runs 10
    PYTHONPATH=python .venv/bin/python bench/cpu_layers.py bert_base --json out.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "zoo"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
sys.path.insert(0, HERE)
import zoo  # noqa: E402
from cpu_bench import kiln_session, ort_session  # noqa: E402


def per_node(trace_file: str, kiln_side: bool, skip: int) -> tuple[dict, dict]:
    """Median microseconds per node (execution order) and the node's op type, from a Chrome trace."""
    with open(trace_file) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    times, ops = collections.defaultdict(list), {}
    for e in events:
        if e.get("ph") != "X":
            continue
        if kiln_side:
            if e.get("name") == "run":
                continue
            name, op = e["name"], e.get("args", {}).get("op_name", "?")
        else:
            if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
                continue
            name, op = e["name"][: -len("_kernel_time")], e.get("args", {}).get("op_name", "?")
        times[name].append(e["dur"])
        ops[name] = op
    return {n: float(np.median(v[skip:] if len(v) > skip else v)) for n, v in times.items()}, ops


def by_op(times: dict, ops: dict) -> list[tuple[str, float]]:
    agg = collections.defaultdict(float)
    for n, t in times.items():
        agg[ops[n]] += t
    return sorted(agg.items(), key=lambda kv: -kv[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="a zoo model name (bench/zoo/zoo.py), or an .onnx file with float32 inputs "
                    "(random data, dynamic dims 1; e.g. build/other/*.onnx from bench/other_models.py)")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--runs", type=int, default=10, help="timed runs of each (after 2 warm-up runs)")
    ap.add_argument("--json", help="also write the per-node medians here")
    args = ap.parse_args()
    if args.model.endswith(".onnx"):
        import onnxruntime as ort  # noqa: PLC0415

        path, rng = args.model, np.random.default_rng(0)
        feed = {i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(np.float32)
                for i in ort.InferenceSession(path, providers=["CPUExecutionProvider"]).get_inputs()}
    else:
        path = zoo.model_path(args.model, args.opset)
        feed = zoo.make_inputs(zoo.MODELS[args.model], args.batch, seed=args.batch)
    with tempfile.TemporaryDirectory() as tmp:
        # The sessions as bench/cpu_bench.py makes them (ORT spinning off), with profiling on.
        k = kiln_session(path, args.threads, profile_prefix=os.path.join(tmp, "kiln"))
        o = ort_session(path, args.threads, spin=False, profile_prefix=os.path.join(tmp, "ort"))
        for i in range(args.runs + 2):
            for s in ((k, o) if i % 2 == 0 else (o, k)):
                s.run(None, feed)
        kt, kops = per_node(k.end_profiling(), True, 2)
        ot, oops = per_node(o.end_profiling(), False, 2)
    print(f"{args.model}, {args.threads} thread(s), batch {args.batch}: sum of per-node medians "
          f"kiln {sum(kt.values()) / 1e3:.2f} ms, ORT {sum(ot.values()) / 1e3:.2f} ms")
    print("\nper op type (ms): kiln | ORT")
    kb, ob = by_op(kt, kops), by_op(ot, oops)
    for i in range(max(len(kb), len(ob))):
        a = kb[i] if i < len(kb) else ("", 0.0)
        b = ob[i] if i < len(ob) else ("", 0.0)
        print(f"  {a[0][:28]:28s} {a[1] / 1e3:8.3f} | {b[0][:28]:28s} {b[1] / 1e3:8.3f}")
    print("\nper node in execution order (us): kiln | ORT")
    kl, ol = list(kt.items()), list(ot.items())
    for i in range(max(len(kl), len(ol))):
        a = kl[i] if i < len(kl) else ("", 0.0)
        b = ol[i] if i < len(ol) else ("", 0.0)
        print(f"  {a[0][-44:]:44s} {a[1]:9.0f} | {b[0][-44:]:44s} {b[1]:9.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "threads": args.threads, "batch": args.batch,
                       "kiln_us": kt, "kiln_ops": kops, "ort_us": ot, "ort_ops": oops}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
