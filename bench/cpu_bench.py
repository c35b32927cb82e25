#!/usr/bin/env python3
"""kiln vs ONNX Runtime on the CPU, side by side in one process.

For each zoo model (build/zoo/, made by bench/zoo/export.py), thread count and batch size, both
runtimes get the same model file, the same inputs and the same number of threads (kiln:
SessionOptions.intra_op_num_threads; ORT: intra_op_num_threads, inter_op_num_threads=1, sequential,
ORT_ENABLE_ALL). After a warm-up, runs alternate A/B (ABBA order, so neither side always goes
first); we report the median and the spread (p10/p90) of each. Batch 1 is latency, batch 8 is
throughput (items/s).

Each runtime runs in a process of its own (default), and the two alternate in blocks of runs (ABBA
again); a block starts once the process that ran the last one has gone idle (no CPU used for
--pause seconds): a runtime's idle threads must not share the cores with the other's runs. ORT's
workers spin after each run by default (up to 0.15 s measured); in one process alternating run by
run, they held one of 2 pinned cores through kiln's next run (MobileNetV2 at 2 threads on the device
host: kiln alone 3.30 ms, ORT alone 3.53 ms; alternating in one process kiln 22.6 ms, ORT 5.0 ms:
bench/results/cpu_host_h200_2026-11-26.md). `--same-process` measures that way.

    .venv/bin/python bench/cpu_bench.py                       # the whole zoo at opset 17
    .venv/bin/python bench/cpu_bench.py --models resnet50,gpt2 --threads 1
    .venv/bin/python bench/cpu_bench.py --profile-slow 2      # also a per-op profile where kiln/ORT > 2
    .venv/bin/python bench/cpu_bench.py --readme-only         # regenerate bench/README.md's tables

Writes bench/results/cpu_<date>.json and regenerates the tables in bench/README.md. Not a test.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import glob
import json
import os
import platform
import re
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(HERE, "zoo"))
import zoo  # noqa: E402

RESULTS = os.path.join(HERE, "results")
README = os.path.join(HERE, "README.md")


# ---- Machine and versions


def machine_info() -> dict:
    info = {"platform": platform.platform(), "python": platform.python_version()}
    cpu, flags = "", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not cpu:
                    cpu = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    info["cpu"] = cpu or platform.processor()
    info["logical_cores"] = os.cpu_count()
    try:
        info["cores_available"] = len(os.sched_getaffinity(0))
    except AttributeError:
        pass
    info["isa"] = sorted(f for f in flags if f in ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                                                    "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_bf16"))
    return info


def versions(ort_python: str | None = None) -> dict:
    import kiln  # noqa: PLC0415
    import onnx  # noqa: PLC0415

    if ort_python:  # ORT's sessions run in that interpreter: its version is the one measured
        ort_version = subprocess.run([ort_python, "-c", "import onnxruntime; print(onnxruntime.__version__)"],
                                     capture_output=True, text=True, check=True).stdout.strip()
    else:
        import onnxruntime as ort  # noqa: PLC0415

        ort_version = ort.__version__
    out = {"kiln": kiln.__version__, "onnxruntime": ort_version, "onnx": onnx.__version__, "numpy": np.__version__}
    try:
        out["kiln_git"] = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                         capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    exporter = next(iter(zoo.read_manifest().values()), {}).get("exporter", {})
    if exporter:
        out["exporter"] = exporter  # torch / torchvision / transformers that made the models
    return out


# ---- Sessions


def kiln_session(path: str, threads: int, tune: bool = False, profile_prefix: str | None = None):
    """profile_prefix: per-node profiling on, its trace written there by end_profiling()."""
    import kiln  # noqa: PLC0415

    so = kiln.SessionOptions()
    so.intra_op_num_threads = threads
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    if tune:
        # An engine tuned at this thread count (each layer's tactics timed: the kernel's own
        # convolution schedules against oneDNN's primitive), at the declared shapes (dynamic dims 1).
        kiln.set_num_threads(threads)
        engine = kiln.Engine.build(path, opt_level=2, tune=True)
        return kiln.InferenceSession(engine.serialize(), so, providers=["CPUExecutionProvider"])
    return kiln.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def ort_session(path: str, threads: int, spin: bool = True, profile_prefix: str | None = None):
    import onnxruntime as ort  # noqa: PLC0415

    so = ort.SessionOptions()
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    if not spin:
        # ORT's workers spin after each run by default; alternating with kiln on as many threads as
        # cores, the spinning steals the cores kiln's (passively waiting) threads need, and kiln's
        # spinning (OMP_WAIT_POLICY=ACTIVE) steals ORT's in turn: bench/results/cpu_tuning.md.
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def timed(sess, feed) -> float:
    start = time.perf_counter()
    sess.run(None, feed)
    return time.perf_counter() - start


def stats(seconds: list[float], batch: int) -> dict:
    ms = np.array(seconds) * 1e3
    med = float(np.median(ms))
    return {
        "median_ms": round(med, 3),
        "p10_ms": round(float(np.percentile(ms, 10)), 3),
        "p90_ms": round(float(np.percentile(ms, 90)), 3),
        "runs": len(ms),
        "items_per_s": round(batch * 1e3 / med, 2),
    }


def pair_row(label: str, fields: dict, kt: list[float], ot: list[float], n: int, err: float) -> dict:
    """One side-by-side result: `fields` (the case, threads, size), kiln's and onnxruntime's stats over
    n rows a call, the largest relative difference of their outputs and the kiln/ORT ratio of medians;
    printed as one line headed by `label`."""
    row = {**fields, "kiln": stats(kt, n), "ort": stats(ot, n), "max_rel_diff": err}
    row["ratio"] = round(row["kiln"]["median_ms"] / row["ort"]["median_ms"], 3)
    print(f"{label}: kiln {row['kiln']['median_ms']:9.3f} ms  ORT {row['ort']['median_ms']:9.3f} ms  "
          f"kiln/ORT {row['ratio']:.2f}  (diff {err:.1e})", flush=True)
    return row


def bench_pair(k_sess, o_sess, feed, warmup: int, min_runs: int, max_runs: int, budget_s: float) -> tuple:
    """Alternating runs (ABBA) until min_runs and the time budget, or max_runs, are reached."""
    for _ in range(warmup):
        timed(k_sess, feed)
        timed(o_sess, feed)
    k_times, o_times = [], []
    start = time.perf_counter()
    i = 0
    while len(k_times) < max_runs and (len(k_times) < min_runs or time.perf_counter() - start < budget_s):
        if i % 2 == 0:
            k_times.append(timed(k_sess, feed))
            o_times.append(timed(o_sess, feed))
        else:
            o_times.append(timed(o_sess, feed))
            k_times.append(timed(k_sess, feed))
        i += 1
    return k_times, o_times


def serve(runtime: str, name: str, opset: int, threads: int, spin: bool, tune: bool) -> int:
    """Child side of the isolated mode: one session, commands on stdin, answers on stdout (one line
    each). `feed B` makes batch B's inputs; `run N` runs N times and answers the seconds of each."""
    path = zoo.model_path(name, opset)
    sess = kiln_session(path, threads, tune) if runtime == "kiln" else ort_session(path, threads, spin)
    feed = None
    out = sys.stdout
    sys.stdout = sys.stderr  # anything else printed must not reach the parent's pipe
    print("ready", file=out, flush=True)
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "feed":
            feed = zoo.make_inputs(zoo.MODELS[name], int(arg), seed=int(arg))
            print("ok", file=out, flush=True)
        elif cmd == "run":
            print(json.dumps([timed(sess, feed) for _ in range(int(arg))]), file=out, flush=True)
        else:
            break
    return 0


class Child:
    """A runtime's session in its own process (see serve)."""

    def __init__(self, runtime: str, name: str, opset: int, threads: int, args):
        python = args.ort_python if runtime == "ort" and args.ort_python else sys.executable
        cmd = [python, os.path.abspath(__file__), "--serve", runtime, "--models", name, "--opset", str(opset),
               "--threads", str(threads)]
        if args.ort_no_spin:
            cmd.append("--ort-no-spin")
        if args.kiln_tune:
            cmd.append("--kiln-tune")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.expect("ready")

    def ask(self, line: str) -> str:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.expect(None)

    def expect(self, want: str | None) -> str:
        got = self.proc.stdout.readline().strip()
        if not got or (want and got != want):
            raise RuntimeError(f"benchmark child {self.proc.args[3:6]} failed (exit {self.proc.poll()}): {got!r}")
        return got

    def runs(self, n: int) -> list[float]:
        return json.loads(self.ask(f"run {n}"))

    def cpu_ticks(self) -> int:
        """CPU time the process has used, all threads (user + system clock ticks)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return int(fields[11]) + int(fields[12])

    def wait_idle(self, window: float, limit: float) -> float:
        """Waits until the process used no CPU for `window` seconds (its workers stopped spinning) or
        `limit` seconds passed; returns the seconds waited."""
        start = time.perf_counter()
        try:
            before = self.cpu_ticks()
            while time.perf_counter() - start < limit:
                time.sleep(window)
                now = self.cpu_ticks()
                if now == before:
                    break
                before = now
        except OSError:  # no /proc: a fixed pause
            time.sleep(window)
        return time.perf_counter() - start

    def close(self) -> None:
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.wait()


def bench_isolated(k: Child, o: Child, batch: int, args) -> tuple:
    """ABBA over blocks of runs, each runtime in its own process. After each block the harness waits
    until the process that ran has used no CPU for --pause seconds (ORT's workers spin on after a run;
    on the device host that lasted up to the waits this records), so the other one runs on idle cores."""
    for c in (k, o):
        c.ask(f"feed {batch}")
        c.runs(args.warmup)
    # About 0.25 s of runs per block, from a first timing; at least one run.
    first = k.runs(1) + o.runs(1)
    per_block = max(1, min(10, int(0.25 / max(max(first), 1e-4))))
    k_times, o_times = [], []
    waits = {"kiln": [], "ort": []}
    start = time.perf_counter()
    i = 0
    last = o
    while len(k_times) < args.max_runs and (len(k_times) < args.min_runs or time.perf_counter() - start < args.budget):
        n = min(per_block, args.max_runs - len(k_times))
        for c, times in ((k, k_times), (o, o_times)) if i % 2 == 0 else ((o, o_times), (k, k_times)):
            waits["kiln" if last is k else "ort"].append(last.wait_idle(args.pause, 5.0))
            times += c.runs(n)
            last = c
        i += 1
    return k_times, o_times, {r: round(max(w), 3) if w else 0.0 for r, w in waits.items()}


def bench_model(name: str, opset: int, threads_list: list[int], batches: list[int], args) -> list[dict]:
    path = zoo.model_path(name, opset)
    spec = zoo.MODELS[name]
    rows = []
    for threads in threads_list:
        if args.same_process:
            k_sess = kiln_session(path, threads, args.kiln_tune)
            o_sess = ort_session(path, threads, not args.ort_no_spin)
        else:
            k_sess = Child("kiln", name, opset, threads, args)
            o_sess = Child("ort", name, opset, threads, args)
        for batch in batches:
            if args.same_process:
                feed = zoo.make_inputs(spec, batch, seed=batch)
                k_times, o_times = bench_pair(k_sess, o_sess, feed, args.warmup, args.min_runs, args.max_runs,
                                              args.budget)
                idle_wait = None
            else:
                k_times, o_times, idle_wait = bench_isolated(k_sess, o_sess, batch, args)
            row = {"model": name, "opset": opset, "threads": threads, "batch": batch,
                   "kiln": stats(k_times, batch), "ort": stats(o_times, batch)}
            row["ratio"] = round(row["kiln"]["median_ms"] / row["ort"]["median_ms"], 3)
            if idle_wait is not None:
                row["longest_idle_wait_s"] = idle_wait  # after each runtime's blocks, until its process went idle
            rows.append(row)
            print(f"{name:30s} t={threads} b={batch}: kiln {row['kiln']['median_ms']:9.2f} ms  "
                  f"ORT {row['ort']['median_ms']:9.2f} ms  ratio {row['ratio']:.2f}", flush=True)
        if not args.same_process:
            k_sess.close()
            o_sess.close()
        del k_sess, o_sess
        gc.collect()
    return rows


# ---- Per-op profile (KILN_PROFILE=1 in a child process: the table prints when its context goes away)

_PROFILE_ROW = re.compile(r"^\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


def profile_one(name: str, opset: int, threads: int, batch: int, runs: int) -> None:
    """Child side: runs kiln `runs` times; the executor prints its table to stderr at the end."""
    sess = kiln_session(zoo.model_path(name, opset), threads)
    feed = zoo.make_inputs(zoo.MODELS[name], batch, seed=batch)
    for _ in range(runs):
        sess.run(None, feed)
    del sess
    gc.collect()


def profile(name: str, opset: int, threads: int, batch: int, runs: int, top: int) -> dict:
    env = dict(os.environ, KILN_PROFILE="1")
    cmd = [sys.executable, os.path.abspath(__file__), "--profile-one", name, "--opset", str(opset),
           "--threads", str(threads), "--batch", str(batch), "--runs", str(runs)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    ops = []
    total = None
    for line in proc.stderr.splitlines():
        m = re.match(r"kiln profile: (\d+) runs, ([\d.]+) ms per run", line)
        if m:
            total = float(m.group(2))
        m = _PROFILE_ROW.match(line)
        if m and m.group(1) != "op":
            ops.append({"op": m.group(1), "calls_per_run": float(m.group(2)), "ms_per_run": float(m.group(3)),
                        "percent": float(m.group(4))})
    if total is None:
        print(f"profile {name}: no table (exit {proc.returncode}): {proc.stderr[-2000:]}", file=sys.stderr)
    return {"model": name, "opset": opset, "threads": threads, "batch": batch, "runs": runs,
            "kernel_ms_per_run": total, "top": ops[:top]}


# ---- README tables

BEGIN, END = "<!-- cpu-bench:begin (generated by bench/cpu_bench.py) -->", "<!-- cpu-bench:end -->"


def spread(s: dict) -> str:
    return f"{s['median_ms']:.2f} ({s['p10_ms']:.2f}–{s['p90_ms']:.2f})"


def render(result: dict, rel_path: str) -> str:
    m = result["machine"]
    v = result["versions"]
    lines = [
        BEGIN,
        f"Latest run: `{rel_path}` ({result['date']}), {m['cpu']}, {m.get('cores_available', m['logical_cores'])} cores "
        f"available, ISA {', '.join(m['isa']) or 'baseline'}; kiln {v['kiln']} ({v.get('kiln_git', '?')}), "
        f"onnxruntime {v['onnxruntime']}. Models at opset {result['config']['opset']}, random weights. "
        f"Order: {result['config'].get('order', 'ABBA alternating runs, one process')}; ORT's spinning "
        f"{'on' if result['config'].get('ort_allow_spinning', True) else 'off'}. "
        "Times: median (p10–p90), milliseconds per call. Ratio > 1: kiln is slower.",
        "",
    ]
    if result.get("note"):
        lines += [result["note"], ""]
    lines += ["| model | threads | batch | kiln ms | ORT ms | kiln/ORT | kiln items/s | ORT items/s |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["results"]:
        lines.append(f"| {r['model']} | {r['threads']} | {r['batch']} | {spread(r['kiln'])} | {spread(r['ort'])} | "
                     f"{r['ratio']:.2f} | {r['kiln']['items_per_s']:.1f} | {r['ort']['items_per_s']:.1f} |")
    if result.get("profiles"):
        lines += ["", f"### Where kiln spends its time (models with kiln/ORT > {result['config']['profile_slow']})", "",
                  "Per-op wall time from `KILN_PROFILE=1` (top-level steps; see src/runtime/executor.h).", ""]
        for p in result["profiles"]:
            lines.append(f"**{p['model']}** ({p['threads']} thread(s), batch {p['batch']}, "
                         f"{p['kernel_ms_per_run'] or 0:.1f} ms per run in kernels):")
            lines.append("")
            lines += ["| op | calls/run | ms/run | % |", "|---|---:|---:|---:|"]
            for o in p["top"]:
                lines.append(f"| {o['op']} | {o['calls_per_run']:g} | {o['ms_per_run']:.2f} | {o['percent']:.1f} |")
            lines.append("")
    lines.append(END)
    return "\n".join(lines)


def write_readme(result: dict, rel_path: str) -> None:
    block = render(result, rel_path)
    text = open(README).read() if os.path.exists(README) else "# kiln benchmarks\n\n"
    if BEGIN in text and END in text:
        text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    with open(README, "w") as f:
        f.write(text)


def write_side_by_side(path: str, config, results: list, machine: dict | None = None, **versions: str) -> None:
    """A side-by-side benchmark's result file (kiln and ONNX Runtime in one process): the machine, the
    versions (kiln, onnxruntime, numpy and any given), the configuration and the rows."""
    import kiln  # noqa: PLC0415
    import onnxruntime as ort  # noqa: PLC0415

    result = {"machine": machine or machine_info(),
              "versions": {"kiln": kiln.__version__, "onnxruntime": ort.__version__, "numpy": np.__version__, **versions},
              "config": vars(config), "results": results}
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", path)


def save_result(result: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    write_readme(result, os.path.relpath(path, HERE))


def add_profiles(result: dict, args, save) -> None:
    """Profiles (at --profile-threads/--profile-batch) each model with kiln/ORT > --profile-slow somewhere."""
    result["profiles"] = []
    if args.profile_slow <= 0:
        return
    result["config"].update(profile_threads=args.profile_threads, profile_batch=args.profile_batch)
    order = list(dict.fromkeys(r["model"] for r in result["results"]))
    slow = [m for m in order if any(r["model"] == m and r["ratio"] > args.profile_slow for r in result["results"])]
    for name in slow:
        result["profiles"].append(profile(name, result["config"]["opset"], args.profile_threads, args.profile_batch,
                                          runs=5, top=args.profile_top))
        save()


def latest_result() -> str | None:
    """The newest bench/results/cpu_<date>[_tag].json (by date, then modification time)."""
    files = [f for f in glob.glob(os.path.join(RESULTS, "cpu_*.json"))
             if re.match(r"cpu_\d{4}-\d\d-\d\d", os.path.basename(f))]
    files.sort(key=lambda f: (os.path.basename(f)[4:14], os.path.getmtime(f)))
    return files[-1] if files else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", help="comma-separated zoo models (default: all present)")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    ap.add_argument("--batches", default="1,8", help="batch sizes (default 1,8)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--min-runs", type=int, default=5)
    ap.add_argument("--max-runs", type=int, default=30)
    ap.add_argument("--budget", type=float, default=8.0, help="seconds of timed runs per configuration (after min-runs)")
    ap.add_argument("--profile-slow", type=float, default=2.0, help="profile models with kiln/ORT above this (0: none)")
    ap.add_argument("--profile-top", type=int, default=8)
    ap.add_argument("--profile-threads", type=int, default=1, help="threads for the profiles (default 1)")
    ap.add_argument("--profile-batch", type=int, default=1, help="batch for the profiles (default 1)")
    ap.add_argument("--reprofile", action="store_true",
                    help="only redo the profiles of the latest result file (and the README), no timings")
    ap.add_argument("--ort-no-spin", action="store_true", help="ORT workers sleep between runs, as kiln's do by default")
    ap.add_argument("--ort-python", help="run ORT's sessions with this Python (another onnxruntime than this "
                    "environment's, e.g. the version on the machine #13 is checked on); needs numpy and onnxruntime")
    ap.add_argument("--kiln-tune", action="store_true", help="kiln engines built with --tune (per-layer tactics timed)")
    ap.add_argument("--same-process", action="store_true",
                    help="both runtimes in this process, alternating run by run (each one's idle threads then "
                         "share the cores with the other's runs)")
    ap.add_argument("--pause", type=float, default=0.05,
                    help="between blocks (one process per runtime): wait until the process that ran used no CPU "
                         "for this many seconds (at most 5 s)")
    ap.add_argument("--note", default="", help="a line for the README (e.g. what was left out and why)")
    ap.add_argument("--out", help="result file (default bench/results/cpu_<date>.json)")
    ap.add_argument("--readme-only", action="store_true", help="regenerate bench/README.md from the latest result file")
    # child mode for profiles
    ap.add_argument("--profile-one", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--runs", type=int, default=5, help=argparse.SUPPRESS)
    ap.add_argument("--serve", choices=["kiln", "ort"], help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.serve:
        return serve(args.serve, args.models, args.opset, int(args.threads), not args.ort_no_spin, args.kiln_tune)

    if args.profile_one:
        profile_one(args.profile_one, args.opset, int(args.threads.split(",")[0]), args.batch, args.runs)
        return 0
    if args.reprofile:
        path = latest_result()
        if not path:
            ap.error("no result file in bench/results/")
        with open(path) as f:
            result = json.load(f)
        result["config"]["profile_slow"] = args.profile_slow
        add_profiles(result, args, lambda: save_result(result, path))
        save_result(result, path)
        return 0
    if args.readme_only:
        path = latest_result()
        if not path:
            ap.error("no result file in bench/results/")
        with open(path) as f:
            write_readme(json.load(f), os.path.relpath(path, HERE))
        return 0

    names = [n for n in (args.models.split(",") if args.models else zoo.MODELS) if n]
    missing = [n for n in names if not os.path.exists(zoo.model_path(n, args.opset))]
    if args.models and missing:
        ap.error("not exported: " + "; ".join(zoo.export_command(n, args.opset) for n in missing))
    names = [n for n in names if n not in missing]
    threads_list = [int(t) for t in args.threads.split(",")]
    batches = [int(b) for b in args.batches.split(",")]

    date = datetime.datetime.now(datetime.timezone.utc)
    result = {
        "date": date.isoformat(timespec="seconds"),
        "machine": machine_info(),
        "versions": versions(args.ort_python),
        "config": {"opset": args.opset, "threads": threads_list, "batches": batches, "warmup": args.warmup,
                   "min_runs": args.min_runs, "max_runs": args.max_runs, "budget_s": args.budget,
                   "profile_slow": args.profile_slow, "ort_graph_optimization": "ORT_ENABLE_ALL",
                   "ort_inter_op_threads": 1,
                   "order": "ABBA alternating runs, one process" if args.same_process else
                            f"ABBA alternating blocks of runs, a process per runtime, the next block when the last "
                            f"one's process used no CPU for {args.pause} s",
                   "kiln_tune": args.kiln_tune,
                   "ort_allow_spinning": not args.ort_no_spin},
        "note": args.note,
        "skipped_not_exported": missing,
        "results": [],
        "profiles": [],
    }
    os.makedirs(RESULTS, exist_ok=True)
    out = args.out or os.path.join(RESULTS, f"cpu_{date.strftime('%Y-%m-%d')}.json")

    def save() -> None:
        save_result(result, out)

    for name in names:
        result["results"] += bench_model(name, args.opset, threads_list, batches, args)
        save()
    add_profiles(result, args, save)
    save()
    print(f"wrote {os.path.relpath(out, ROOT)} and bench/README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
