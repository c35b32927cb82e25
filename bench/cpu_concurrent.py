#!/usr/bin/env python3
"""Several sessions running at once on the same cores (oversubscription), kiln vs ONNX Runtime.

Each configuration runs in a child process: `--sessions` Python threads, each with its own session
of the model at `--threads` intra-op threads, call run() in a loop for `--seconds`; the figures are
the runs per second of all of them together and the median / p90 latency of one run.
Configurations: kiln as shipped (OpenMP workers spin briefly, then sleep: GOMP_SPINCOUNT=10000 and
OMP_WAIT_POLICY=PASSIVE, set by the package), kiln with OMP_WAIT_POLICY=ACTIVE (workers spin), and
ONNX Runtime (a thread pool per session) with spinning off and on. Not a test.

    PYTHONPATH=python .venv/bin/python bench/cpu_concurrent.py --models mobilenet_v2,resnet50
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "zoo"))
sys.path.insert(0, HERE)


def child(args) -> None:
    import zoo  # noqa: PLC0415
    from cpu_bench import kiln_session, ort_session  # noqa: PLC0415

    path = zoo.model_path(args.model, 17)
    feed = zoo.make_inputs(zoo.MODELS[args.model], 1, seed=1)
    if args.runtime.startswith("ort"):
        spin = args.runtime == "ort_spin"

        def make():
            return ort_session(path, args.threads, spin=spin)
    else:

        def make():
            return kiln_session(path, args.threads)
    sessions = [make() for _ in range(args.sessions)]
    for s in sessions:
        s.run(None, feed)
        s.run(None, feed)
    times: list[list[float]] = [[] for _ in sessions]
    start = threading.Barrier(len(sessions))

    def loop(i: int) -> None:
        start.wait()
        end = time.perf_counter() + args.seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            sessions[i].run(None, feed)
            times[i].append(time.perf_counter() - t0)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(len(sessions))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    runs = sum(len(t) for t in times)
    lat = np.concatenate([np.array(t) for t in times]) * 1e3
    print(json.dumps({"runs_per_s": runs / args.seconds, "median_ms": float(np.median(lat)),
                      "p90_ms": float(np.percentile(lat, 90))}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="mobilenet_v2,resnet50")
    ap.add_argument("--sessions", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=2, help="each configuration this many times, interleaved")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--runtime", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return 0
    configs = [("kiln", "kiln", {}), ("kiln, spinning workers", "kiln", {"OMP_WAIT_POLICY": "ACTIVE"}),
               ("onnxruntime", "ort", {}), ("onnxruntime, spinning", "ort_spin", {})]
    print(f"{args.sessions} sessions x {args.threads} threads at once, {os.cpu_count()} CPUs; runs/s of all "
          f"sessions together, median / p90 latency of one run (ms)")
    for model in args.models.split(","):
        results: dict[str, list[dict]] = {c[0]: [] for c in configs}
        for _ in range(args.rounds):
            for label, runtime, env in configs:
                cmd = [sys.executable, os.path.abspath(__file__), "--child", "--model", model, "--runtime", runtime,
                       "--sessions", str(args.sessions), "--threads", str(args.threads), "--seconds", str(args.seconds)]
                out = subprocess.run(cmd, env=dict(os.environ, **env), capture_output=True, text=True, check=True)
                results[label].append(json.loads(out.stdout.strip().splitlines()[-1]))
        for label, rs in results.items():
            print(f"  {model:14s} {label:22s} " + "  ".join(
                f"{r['runs_per_s']:7.1f} runs/s ({r['median_ms']:.1f} / {r['p90_ms']:.1f} ms)" for r in rs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
