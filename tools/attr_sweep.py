#!/usr/bin/env python3
"""Extreme-attribute sweep over onnx's node test models (issue #48).

Every one-node model that onnx ships as a backend test (onnx/backend/test/data/node/*/model.onnx,
with its inputs in test_data_set_0/input_*.pb) is a seed. For each integer attribute the sweep makes
one mutated model per extreme value (0, -1, 2^31, INT64_MAX, INT64_MIN); for each integer list, one
per element and value; for each float attribute, one per NaN, +inf, -inf; and for each small integer
input (an axes, shape, pads or repeats tensor fed with the seed's data) one per element and value.
Each mutant runs through `kiln run` in its own child process, with the seed's real inputs, under a
wall timeout and an address-space limit, and ends in one class:

  ERROR        non-zero exit with a message and no signal (the expected answer to a bad value)
  OK           ran and exited 0
  TIMEOUT      still running at the timeout (killed)
  CRASH        killed by a signal, or a sanitizer report / abort message on stderr
  OVER-MEMORY  peak RSS above the bound, or an allocation refused by the address-space limit

TIMEOUT, CRASH and OVER-MEMORY are bugs. The report is JSON (--json) and a table on stdout.

  tools/attr_sweep.py                      # the full sweep (about 15 minutes on 2 cores)
  tools/attr_sweep.py --subset 150         # a deterministic sample, for CI
  KILN_CLI=build-asan/kiln tools/attr_sweep.py --subset 150 --mem-limit-mb 0
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import copy
import dataclasses
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

INT_EXTREMES = {"0": 0, "-1": -1, "2^31": 2**31, "INT64_MAX": 2**63 - 1, "INT64_MIN": -(2**63)}
FLOAT_EXTREMES = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
MAX_LIST_ELEMENTS = 4  # mutate the first few elements of an int list or an integer input
MAX_INPUT_ELEMENTS = 8  # an integer input up to this size counts as a small "attribute-like" tensor
BUG_CLASSES = ("TIMEOUT", "CRASH", "OVER-MEMORY")
# Ops whose integer inputs are the data, not a size an attribute sets: a huge value asks for a huge
# output that kiln must make when the caller means it (bounded by max_tensor_bytes, a quarter of the
# machine by default). Their TIMEOUT/OVER-MEMORY from input mutations are DATA-SIZED, not bugs (a
# CRASH still is one).
DATA_SIZED = {"Range": "start, limit and delta are the data: Range(2^31, 0, -1) is 2^31 elements"}
CRASH_MARKERS = ("AddressSanitizer", "UndefinedBehaviorSanitizer", "LeakSanitizer", "runtime error:",
                 "terminate called", "Assertion", "Aborted", "Segmentation fault")


def node_test_dir() -> str:
    import onnx.backend.test as backend_test
    return os.path.join(os.path.dirname(backend_test.__file__), "data", "node")


@dataclasses.dataclass
class Seed:
    name: str  # the onnx test's directory name
    model: onnx.ModelProto
    inputs: dict  # input name -> numpy array


@dataclasses.dataclass
class Case:
    seed: str
    op: str
    kind: str  # "attr", "attr-list", "float-attr" or "input"
    target: str  # attribute or input name, with [i] for a list element
    value: str  # a key of INT_EXTREMES or FLOAT_EXTREMES

    @property
    def key(self) -> str:
        return f"{self.seed}:{self.target}={self.value}"


def load_seeds(root: str) -> list[Seed]:
    """The one-node tests whose inputs are all plain tensors (the CLI takes .npy files only)."""
    seeds = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name, "model.onnx")
        data = os.path.join(root, name, "test_data_set_0")
        if not os.path.exists(path) or not os.path.isdir(data):
            continue
        m = onnx.load(path)
        if len(m.graph.node) != 1:
            continue
        inputs, ok = {}, True
        for i, vi in enumerate(m.graph.input):
            if not vi.type.HasField("tensor_type"):
                ok = False
                break
            pb = os.path.join(data, f"input_{i}.pb")
            if not os.path.exists(pb):
                ok = False
                break
            t = onnx.TensorProto()
            with open(pb, "rb") as f:
                t.ParseFromString(f.read())
            try:
                inputs[vi.name] = numpy_helper.to_array(t)
            except Exception:  # noqa: BLE001 (types numpy cannot hold: bfloat16, float8, int4)
                ok = False
                break
            if inputs[vi.name].dtype == object:  # strings: .npy of objects needs pickle
                ok = False
                break
        if ok:
            seeds.append(Seed(name, m, inputs))
    return seeds


def cases_of(seed: Seed) -> list[Case]:
    node = seed.model.graph.node[0]
    out = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.INT:
            out += [Case(seed.name, node.op_type, "attr", a.name, v) for v in INT_EXTREMES]
        elif a.type == onnx.AttributeProto.INTS:
            for i in range(min(len(a.ints), MAX_LIST_ELEMENTS)):
                out += [Case(seed.name, node.op_type, "attr-list", f"{a.name}[{i}]", v) for v in INT_EXTREMES]
        elif a.type == onnx.AttributeProto.FLOAT:
            out += [Case(seed.name, node.op_type, "float-attr", a.name, v) for v in FLOAT_EXTREMES]
    for name, arr in seed.inputs.items():
        if arr.dtype in (np.int32, np.int64) and 0 < arr.size <= MAX_INPUT_ELEMENTS:
            for i in range(min(arr.size, MAX_LIST_ELEMENTS)):
                out += [Case(seed.name, node.op_type, "input", f"{name}[{i}]", v) for v in INT_EXTREMES]
    return out


def mutate(seed: Seed, case: Case) -> tuple[onnx.ModelProto, dict]:
    """The seed's model and inputs with the case's one value changed."""
    m = copy.deepcopy(seed.model)
    inputs = dict(seed.inputs)
    name, _, idx = case.target.partition("[")
    i = int(idx[:-1]) if idx else None
    if case.kind == "input":
        arr = inputs[name].copy()
        info = np.iinfo(arr.dtype)
        arr.flat[i] = min(max(INT_EXTREMES[case.value], info.min), info.max)  # int32: saturate
        inputs[name] = arr
        return m, inputs
    attr = next(a for a in m.graph.node[0].attribute if a.name == name)
    if case.kind == "attr":
        attr.i = INT_EXTREMES[case.value]
    elif case.kind == "attr-list":
        attr.ints[i] = INT_EXTREMES[case.value]
    else:
        attr.f = FLOAT_EXTREMES[case.value]
    return m, inputs


@dataclasses.dataclass
class Outcome:
    cls: str
    seconds: float
    max_rss_mb: float
    returncode: int
    message: str


def run_child(cmd: list[str], timeout: float, mem_limit_mb: int, max_rss_mb: int, workdir: str) -> Outcome:
    """Runs cmd with its own process group, a wall timeout and (if mem_limit_mb) RLIMIT_AS; peak RSS
    comes from wait4, for this child alone."""
    def limit():
        if mem_limit_mb:
            b = mem_limit_mb << 20
            resource.setrlimit(resource.RLIMIT_AS, (b, b))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    env = dict(os.environ, OMP_NUM_THREADS="1")
    with open(os.path.join(workdir, "stderr"), "w+b") as err:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=limit,
                             start_new_session=True, env=env)
        timed_out = False
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout:
                timed_out = True
                os.killpg(p.pid, signal.SIGKILL)
                _, status, usage = os.wait4(p.pid, 0)
                break
            time.sleep(0.01)
        seconds = time.monotonic() - t0
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
    rss_mb = usage.ru_maxrss / 1024.0
    rc = p.returncode
    msg = text.strip()[-600:]
    if timed_out:
        cls = "TIMEOUT"
    elif rc < 0 or any(k in text for k in CRASH_MARKERS):
        cls = "CRASH"
    elif rss_mb > max_rss_mb or (mem_limit_mb and "out of memory" in text):
        cls = "OVER-MEMORY"
    elif rc == 0:
        cls = "OK"
    elif text.strip():
        cls = "ERROR"
    else:
        cls = "CRASH"  # a non-zero exit without a word is not a clear error
    return Outcome(cls, round(seconds, 3), round(rss_mb, 1), rc, msg)


def run_case(kiln: str, seed: Seed, case: Case | None, args, tmp_root: str) -> Outcome:
    tag = hashlib.sha1((case.key if case else seed.name).encode()).hexdigest()[:16]
    d = os.path.join(tmp_root, tag)
    os.makedirs(d, exist_ok=True)
    m, inputs = mutate(seed, case) if case else (seed.model, seed.inputs)
    path = os.path.join(d, "model.onnx")
    with open(path, "wb") as f:
        f.write(m.SerializeToString())  # no checker: these models are wrong on purpose
    cmd = [kiln, "run", path, "--threads", "1"]
    for i, (name, arr) in enumerate(inputs.items()):
        npy = os.path.join(d, f"in{i}.npy")
        np.save(npy, arr)
        cmd += ["--input", f"{name}={npy}"]
    why = ""
    for _ in range(3):
        try:
            return run_child(cmd, args.timeout, args.mem_limit_mb, args.max_rss_mb, d)
        except OSError as e:  # the command being relinked by a build: wait and try again
            why = str(e)
            time.sleep(2.0)
    return Outcome("SKIPPED", 0.0, 0.0, -1, f"could not start {kiln}: {why}")


def find_kiln(arg: str | None) -> str:
    kiln = arg or os.environ.get("KILN_CLI") or os.path.join(REPO, "build", "kiln")
    if not os.access(kiln, os.X_OK):
        sys.exit(f"attr_sweep: no kiln command at {kiln}; pass --kiln or set KILN_CLI")
    return kiln


def sample(cases: list[Case], n: int) -> list[Case]:
    """A deterministic sample of n cases: ordered by a hash of the case's key, so the same cases are
    drawn on every machine and adding a seed moves few others."""
    return sorted(cases, key=lambda c: hashlib.sha1(c.key.encode()).hexdigest())[:n]


def sweep(args) -> dict:
    kiln = find_kiln(args.kiln)
    seeds = load_seeds(node_test_dir())
    if args.filter:
        seeds = [s for s in seeds if any(f in s.name for f in args.filter)]
    if args.start:
        seeds = [s for s in seeds if s.name >= args.start]
    by_name = {s.name: s for s in seeds}
    cases = [c for s in seeds for c in cases_of(s)]
    if args.dedupe:  # the first seed (by name) of each op, target and value
        firsts = {}
        for c in cases:
            firsts.setdefault((c.op, c.kind, c.target, c.value), c)
        cases = list(firsts.values())
    if args.subset:
        cases = sample(cases, args.subset)
    seed_names = sorted({c.seed for c in cases})
    t0 = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="attr_sweep_") as tmp, \
            concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        # A seed that kiln cannot run as shipped (an unsupported op or type) says nothing about its
        # attributes: its mutants are skipped, but a seed that crashes is reported like a mutant.
        base = dict(zip(seed_names, pool.map(lambda n: run_case(kiln, by_name[n], None, args, tmp), seed_names)))
        runnable = [c for c in cases if base[c.seed].cls == "OK"]
        for name, o in base.items():
            if o.cls in BUG_CLASSES:
                results.append({"seed": name, "op": by_name[name].model.graph.node[0].op_type, "kind": "seed",
                                "target": "", "value": "", **dataclasses.asdict(o)})
        futures = {pool.submit(run_case, kiln, by_name[c.seed], c, args, tmp): c for c in runnable}
        for fut in concurrent.futures.as_completed(futures):
            c = futures[fut]
            results.append({**dataclasses.asdict(c), **dataclasses.asdict(fut.result())})
            if c.kind == "input" and c.op in DATA_SIZED and results[-1]["cls"] in ("TIMEOUT", "OVER-MEMORY"):
                results[-1]["cls"] = "DATA-SIZED"
            if args.verbose and results[-1]["cls"] in BUG_CLASSES:
                print(f"{results[-1]['cls']:12} {c.op:24} {c.target}={c.value} ({c.seed})", flush=True)
    results.sort(key=lambda r: (r["op"], r["seed"], r["target"], r["value"]))
    counts = collections.Counter(r["cls"] for r in results)
    return {
        "kiln": kiln,
        "onnx": onnx.__version__,
        "subset": args.subset,
        "seeds": len(seed_names),
        "seeds_skipped": sorted(n for n, o in base.items() if o.cls != "OK"),
        "cases": len(results),
        "counts": dict(sorted(counts.items())),
        "seconds": round(time.monotonic() - t0, 1),
        "bugs": [r for r in results if r["cls"] in BUG_CLASSES],
        "results": results,
    }


def summary(report: dict, all_ops: bool = False) -> str:
    lines = [f"kiln {report['kiln']}: {report['cases']} cases from {report['seeds']} seeds "
             f"({len(report['seeds_skipped'])} seeds not runnable as shipped, their mutants skipped) "
             f"in {report['seconds']} s"]
    per_op = collections.defaultdict(collections.Counter)
    for r in report["results"]:
        per_op[r["op"]][r["cls"]] += 1
    classes = ["ERROR", "OK", *BUG_CLASSES, "DATA-SIZED"]
    lines.append(f"{'op':28}" + "".join(f"{c:>12}" for c in classes))
    for op in sorted(per_op):
        if all_ops or any(per_op[op][c] for c in BUG_CLASSES):
            lines.append(f"{op:28}" + "".join(f"{per_op[op][c]:>12}" for c in classes))
    total = collections.Counter(report["counts"])
    lines.append(f"{'total':28}" + "".join(f"{total[c]:>12}" for c in classes))
    for b in report["bugs"]:
        lines.append(f"  {b['cls']:12} {b['op']} {b['target']}={b['value']} ({b['seed']}, {b['seconds']} s, "
                     f"{b['max_rss_mb']} MB, rc {b['returncode']}): {b['message'][-160:]!r}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", help="the kiln command (default: $KILN_CLI, else build/kiln in this repo)")
    ap.add_argument("--subset", type=int, default=0, help="run a deterministic sample of N cases")
    ap.add_argument("--filter", action="append", help="only seeds whose name contains this (repeatable)")
    ap.add_argument("--start", help="only seeds whose name sorts at or after this (resumes a sweep)")
    ap.add_argument("--dedupe", action="store_true",
                    help="one seed per op, attribute and value (a quicker sweep: about a fifth of the cases)")
    ap.add_argument("--jobs", type=int, default=2, help="children at once (default 2)")
    ap.add_argument("--timeout", type=float, default=5.0, help="seconds per case (default 5)")
    ap.add_argument("--max-rss-mb", type=int, default=1024, help="peak RSS above this is OVER-MEMORY")
    ap.add_argument("--mem-limit-mb", type=int, default=4096,
                    help="RLIMIT_AS of each child (0: none; sanitizer builds need 0)")
    ap.add_argument("--json", help="write the full report here")
    ap.add_argument("--all-ops", action="store_true", help="a table row for every op, not only failing ones")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each bug as it is found")
    args = ap.parse_args(argv)
    report = sweep(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    print(summary(report, args.all_ops))
    return 1 if report["bugs"] else 0


if __name__ == "__main__":
    sys.exit(main())
