#!/usr/bin/env python3
"""One runtime alone in its process: median latency of kiln or onnxruntime on zoo models.

bench/cpu_bench.py alternates the two runtimes in one process, so each one's idle threads (ORT's
spinning workers, kiln's briefly spinning OpenMP workers) share the cores with the other's runs.
This script times one runtime with nothing else in the process, to tell a runtime's own speed from
the interference (run it under taskset like cpu_bench.py):

    taskset -c 2,3 python3 bench/cpu_alone.py kiln --models mobilenet_v2 --threads 2
    taskset -c 2,3 python3 bench/cpu_alone.py ort --no-spin --models mobilenet_v2 --threads 2
Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cpu_bench  # noqa: E402
import zoo  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runtime", choices=["kiln", "ort"])
    ap.add_argument("--models", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--no-spin", action="store_true", help="ORT: workers sleep between runs")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    env = {k: os.environ[k] for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS") if k in os.environ}
    for name in args.models.split(","):
        path = zoo.model_path(name, 17)
        if args.runtime == "kiln":
            sess = cpu_bench.kiln_session(path, args.threads)
        else:
            sess = cpu_bench.ort_session(path, args.threads, spin=not args.no_spin)
        feed = zoo.make_inputs(zoo.MODELS[name], args.batch, seed=args.batch)
        for _ in range(3):
            sess.run(None, feed)
        times = [cpu_bench.timed(sess, feed) for _ in range(args.runs)]
        print(json.dumps({"runtime": args.runtime, "label": args.label, "model": name, "threads": args.threads,
                          "batch": args.batch, "spin": not args.no_spin, "env": env,
                          **cpu_bench.stats(times, args.batch)}), flush=True)
        del sess
    return 0


if __name__ == "__main__":
    sys.exit(main())
