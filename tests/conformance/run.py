#!/usr/bin/env python3
"""ONNX conformance: onnx's own backend test runner, unmodified, against kiln.backend.

    python tests/conformance/run.py                      # the node suite
    python tests/conformance/run.py --suite all          # node, simple, pytorch-converted, pytorch-operator, real
    python tests/conformance/run.py -k 'test_conv'       # only tests whose name matches a regex
    python tests/conformance/run.py --update-expected    # refresh expected_failures.txt from this run
    pytest tests/conformance/run.py                      # the same tests, collected by pytest (no bookkeeping)

The tests come from onnx.backend.test.BackendTest(kiln.backend); its include/exclude mechanism is
used only to drop the CUDA variants (kiln's CPU path is what this suite checks; run CUDA ones with
--device cuda). Each test runs in a worker process with a per-test timeout; a test that crashes the
worker or times out counts as failed, and the run continues in a fresh worker.

Output: one line per suite, `node: N passed, N failed, N skipped` (counting every CPU test of the
suite), then the pass percentage over the node suite. Expected failures live in
expected_failures.txt (`test_name  # reason`); an unlisted failure is a regression (exit code 1); a
listed test that passes is reported so it can be removed from the list. Tests whose values cannot
decide on every machine (NOT_COMPARABLE: random draws, an ill-conditioned light model) are run, but
only an error other than a value mismatch counts: they are reported as skipped, so chance agreement
cannot flip the counts either way.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import subprocess
import sys
import tempfile
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EXPECTED_FILE = os.path.join(HERE, "expected_failures.txt")

# suite name → BackendTest category
SUITES = {
    "node": "OnnxBackendNodeModelTest",
    "simple": "OnnxBackendSimpleModelTest",
    "pytorch-converted": "OnnxBackendPyTorchConvertedModelTest",
    "pytorch-operator": "OnnxBackendPyTorchOperatorModelTest",
    "real": "OnnxBackendRealModelTest",  # the "light" models shipped with onnx, run on dummy inputs
}
SUITE_ALIASES = {"light": "real"}

# Tests whose expected outputs are numpy.random draws: no backend reproduces them, yet a backend's own
# draws match by chance now and then (Bernoulli on 10 elements agrees ~2% of runs). They still run, so
# a crash or a wrong shape/dtype fails; a value mismatch, or a lucky match, reports them as skipped.
# Tests whose values cannot decide pass or fail on a given machine, with why; handled the same way.
NOT_COMPARABLE = [
    (re.compile(r"^test_bernoulli"),
     "random output: the expected values are numpy.random draws; ran, values not comparable"),
    # The "light" SqueezeNet has every weight equal (0.02), so its 1000 logits are one value, ~9.5e9,
    # up to float32 rounding, and the Softmax over them is uniform only where every channel is summed
    # in the same order. ONNX Runtime's MLAS does that; oneDNN's sgemm picks kernels by CPU, and on
    # some CPUs (this one on 2026-11-23; a fresh CI clone before) its channels differ by ~1e-7
    # relative, i.e. by thousands, and the Softmax turns one-hot. Every layer before it agrees with
    # ONNX Runtime to ≤ 5e-6 relative (checked layer by layer on 2026-11-23).
    (re.compile(r"^test_squeezenet"),
     "ill-conditioned: Softmax over 1000 logits of ~9.5e9 equal up to float32 rounding (constant weights); "
     "ran, values depend on the CPU's sgemm summation order"),
]


def not_comparable(name: str) -> str | None:
    for pattern, reason in NOT_COMPARABLE:
        if pattern.match(name):
            return reason
    return None

# kiln is the installed package (scripts/install.sh puts it into .venv; PYTHONPATH=python runs the
# source tree's instead).
# The real/light suite writes its generated test data under ONNX_HOME; keep it out of $HOME.
os.environ.setdefault("ONNX_HOME", os.path.join(tempfile.gettempdir(), "kiln-onnx-home"))


def make_backend_test(device: str = "cpu"):
    import onnx.backend.test  # noqa: PLC0415

    import kiln.backend  # noqa: PLC0415

    backend_test = onnx.backend.test.BackendTest(kiln.backend, __name__)
    other = "cuda" if device == "cpu" else "cpu"
    backend_test.exclude(rf"_{other}$")
    return backend_test


def all_tests(backend_test, device: str) -> dict[str, list[str]]:
    """suite → sorted test names of that suite for `device`."""
    out = {}
    for suite, category in SUITES.items():
        case = backend_test.test_cases[category]
        out[suite] = sorted(n for n in dir(case) if n.startswith("test_") and n.endswith(f"_{device}"))
    return out


# ---- Expected failures


def read_expected(path: str) -> dict[str, str]:
    expected = {}
    if not os.path.exists(path):
        return expected
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, reason = line.partition("#")
            expected[name.strip()] = reason.strip()
    return expected


# Failures whose cause is known from the message alone: (regex on the message, reason).
KNOWN_CAUSES = [
    (r"^DTypePromotionError: The DTypes .* and <class 'numpy\.dtype\[(\w+)\]'>",
     r"onnx runner limitation: np.testing.assert_allclose cannot compare \1 arrays (numpy 1.26 + ml_dtypes); "
     r"fails for every backend"),
]


def triage(message: str) -> str:
    for pattern, reason in KNOWN_CAUSES:
        m = re.search(pattern, message)
        if m:
            return m.expand(reason)
    return f"not yet triaged: {message}"


def write_expected(path: str, expected: dict[str, str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("# ONNX conformance tests kiln is known to fail: `test_name  # reason`.\n")
        f.write("# Regenerate with: python tests/conformance/run.py --suite all --update-expected\n")
        for name in sorted(expected):
            reason = expected[name].replace("\n", " ")
            f.write(f"{name}  # {reason}\n")


# ---- Worker: runs tests by name, one JSON line per test on the result pipe


def _first_line(text: str) -> str:
    """The first line of an error, with the next one when the first only introduces it."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ""
    first = lines[0]
    generic = first.endswith(":") or first.startswith(("Not equal to tolerance", "Arrays are not equal", "Items are not equal"))
    if generic and len(lines) > 1:
        first = f"{first} {lines[1]}"
    return first


class _Result(unittest.TestResult):
    def __init__(self) -> None:
        super().__init__()
        self.outcome = "passed"
        self.message = ""

    def _fail(self, err) -> None:
        exc_type, exc, _tb = err
        self.outcome = "failed"
        self.message = f"{exc_type.__name__}: {_first_line(str(exc))}"[:300]
        self.traceback = "".join(traceback.format_exception(*err))

    def addError(self, test, err) -> None:  # noqa: N802
        self._fail(err)

    def addFailure(self, test, err) -> None:  # noqa: N802
        self._fail(err)

    def addSkip(self, test, reason) -> None:  # noqa: N802
        self.outcome = "skipped"
        self.message = reason

    def addExpectedFailure(self, test, err) -> None:  # noqa: N802
        self._fail(err)

    def addUnexpectedSuccess(self, test) -> None:  # noqa: N802
        self.outcome = "passed"


def worker(names_file: str, start: int, result_fd: int, device: str, verbose: bool) -> int:
    with open(names_file, encoding="utf-8") as f:
        names = [ln.strip() for ln in f if ln.strip()]
    backend_test = make_backend_test(device)
    cases = {}
    for category, case in backend_test.test_cases.items():
        for n in dir(case):
            if n.startswith("test_"):
                cases[n] = case
    out = os.fdopen(result_fd, "w", buffering=1, encoding="utf-8")
    for name in names[start:]:
        out.write(json.dumps({"start": name}) + "\n")
        result = _Result()
        t0 = time.perf_counter()
        cases[name](name).run(result)
        reason = not_comparable(name)
        if reason and (result.outcome == "passed" or value_mismatch(result.message)):
            result.outcome, result.message = "skipped", reason
        record = {"name": name, "outcome": result.outcome, "message": result.message,
                  "seconds": round(time.perf_counter() - t0, 3)}
        if verbose and result.outcome == "failed":
            sys.stderr.write(f"---- {name}\n{result.traceback}\n")
        out.write(json.dumps(record) + "\n")
    return 0


def value_mismatch(message: str) -> bool:
    """A failure of numpy's value comparison alone (not a shape, dtype or output-count mismatch, and no
    error): the only failure a NOT_COMPARABLE test may turn into a skip."""
    values = "Not equal to tolerance" in message or "Arrays are not equal" in message
    return message.startswith("AssertionError") and values and "mismatch)" not in message


# ---- Driver: runs the workers, restarting after a crash or a timeout


def run_tests(names: list[str], args) -> dict[str, dict]:
    results: dict[str, dict] = {}
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write("\n".join(names) + "\n")
        names_file = f.name
    log = open(args.log, "a", encoding="utf-8") if args.log else None  # noqa: SIM115
    try:
        start = 0
        while start < len(names):
            start = _run_worker(names, start, names_file, args, results, log)
    finally:
        os.unlink(names_file)
        if log:
            log.close()
    return results


def _run_worker(names, start, names_file, args, results, log) -> int:
    """Runs a worker from `start`; returns where the next worker should begin."""
    read_fd, write_fd = os.pipe()
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", names_file, "--start", str(start),
           "--result-fd", str(write_fd), "--device", args.device]
    if args.verbose:
        cmd.append("--verbose")
    # stderr goes to a scratch file so a crash can be explained by the worker's last words
    stderr_file = tempfile.TemporaryFile()  # noqa: SIM115
    sink = log if log else (None if args.verbose else subprocess.DEVNULL)
    proc = subprocess.Popen(cmd, pass_fds=(write_fd,), stdout=sink, stderr=stderr_file)
    os.close(write_fd)
    current, started = None, time.monotonic()
    buffer = b""
    try:
        while True:
            remaining = args.timeout - (time.monotonic() - started) if current else args.timeout + 60
            ready, _, _ = select.select([read_fd], [], [], max(remaining, 0.1))
            if not ready:
                if current and time.monotonic() - started >= args.timeout:
                    proc.kill()
                    proc.wait()
                    _record(results, current, "failed", f"timeout: still running after {args.timeout:.0f} s", args)
                    return names.index(current) + 1
                continue
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:  # the worker is gone
                rc = proc.wait()
                if current is None:
                    if rc != 0 and start < len(names) and names[start] not in results:
                        # died before starting a test (import error, ...): count the rest as failed
                        for n in names[start:]:
                            _record(results, n, "failed", f"worker failed to start (exit {rc}){_last_words(stderr_file, log)}", args)
                    return len(names)
                why = f"crashed (signal {-rc})" if rc < 0 else f"worker exited with code {rc}"
                why += _last_words(stderr_file, log)
                _record(results, current, "failed", why, args)
                return names.index(current) + 1
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                msg = json.loads(line.decode("utf-8", "replace"))
                if "start" in msg:
                    current, started = msg["start"], time.monotonic()
                else:
                    _record(results, msg["name"], msg["outcome"], msg["message"], args, msg.get("seconds"))
                    current = None
                    if msg["name"] == names[-1]:
                        proc.wait()
                        return len(names)
    finally:
        os.close(read_fd)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if args.verbose or log:
            stderr_file.seek(0)
            text = stderr_file.read().decode("utf-8", "replace")
            (log or sys.stderr).write(text)
        stderr_file.close()


def _last_words(stderr_file, log) -> str:
    """': <last stderr line>' of a dead worker, or ''."""
    stderr_file.seek(0)
    lines = [ln.strip() for ln in stderr_file.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    stderr_file.seek(0, os.SEEK_END)
    return f": {lines[-1][:200]}" if lines else ""


def _record(results, name, outcome, message, args, seconds=None) -> None:
    results[name] = {"outcome": outcome, "message": message, "seconds": seconds}
    if args.verbose or args.progress:
        extra = f" ({message})" if outcome != "passed" and message else ""
        print(f"{outcome.upper():7} {name}{extra}", flush=True)


# ---- Main


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="node",
                   help="comma-separated: node, simple, pytorch-converted, pytorch-operator, real (alias light), "
                        "or all (default: node)")
    p.add_argument("-k", "--filter", default=None, help="only tests whose name matches this regex")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="which variants to run (default cpu)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per test before it counts as failed")
    p.add_argument("--expected", default=EXPECTED_FILE, help="the expected-failures file")
    p.add_argument("--update-expected", action="store_true",
                   help="rewrite the expected-failures file from this run (keeps triaged reasons)")
    p.add_argument("--json", default=None, help="write every test's outcome to this JSON file")
    p.add_argument("--log", default=None, help="append the workers' stdout/stderr to this file")
    p.add_argument("--progress", action="store_true", help="print each test's outcome as it finishes")
    p.add_argument("-v", "--verbose", action="store_true", help="progress plus tracebacks of failures")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--result-fd", type=int, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def selected_suites(spec: str) -> list[str]:
    if spec == "all":
        return list(SUITES)
    suites = []
    for s in spec.split(","):
        s = SUITE_ALIASES.get(s.strip(), s.strip())
        if s not in SUITES:
            raise SystemExit(f"unknown suite {s!r}; choose from {', '.join(SUITES)}, light, all")
        suites.append(s)
    return suites


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker(args.worker, args.start, args.result_fd, args.device, args.verbose)

    suites = selected_suites(args.suite)
    tests = all_tests(make_backend_test(args.device), args.device)
    pattern = re.compile(args.filter) if args.filter else None
    per_suite = {s: [n for n in tests[s] if not pattern or pattern.search(n)] for s in suites}
    names = [n for s in suites for n in per_suite[s]]

    t0 = time.monotonic()
    results = run_tests(names, args)
    elapsed = time.monotonic() - t0

    expected = read_expected(args.expected)
    known = {n for s in SUITES for n in tests[s]}
    regressions, fixed = [], []
    for name in names:
        r = results[name]
        if r["outcome"] == "failed" and name not in expected:
            regressions.append(name)
        elif r["outcome"] == "passed" and name in expected:
            fixed.append(name)

    for name in fixed:
        print(f"unexpectedly passing: remove it from the list: {name}")
    for name in regressions:
        print(f"REGRESSION {name}: {results[name]['message']}")
    stale = sorted(n for n in expected if n not in known and n.endswith(f"_{args.device}"))
    for name in stale:
        print(f"warning: {os.path.basename(args.expected)} lists unknown test {name}")

    for s in suites:
        counts = {"passed": 0, "failed": 0, "skipped": 0}
        for n in per_suite[s]:
            counts[results[n]["outcome"]] += 1
        print(f"{s}: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    if "node" in suites and per_suite["node"]:
        passed = sum(results[n]["outcome"] == "passed" for n in per_suite["node"])
        total = len(tests["node"]) if not pattern else len(per_suite["node"])
        print(f"node pass rate: {100.0 * passed / total:.1f}% ({passed}/{total} {args.device} tests)")
    print(f"({len(names)} tests in {elapsed:.0f} s; {len(regressions)} unexpected failures, "
          f"{len(fixed)} unexpectedly passing)")

    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1, sort_keys=True)

    if args.update_expected:
        updated = {n: r for n, r in expected.items() if n not in results}
        for name in names:
            r = results[name]
            if r["outcome"] != "failed":
                continue
            old = expected.get(name, "")
            if old and not old.startswith("not yet triaged"):
                updated[name] = old
            else:
                updated[name] = triage(r["message"])
        write_expected(args.expected, updated)
        print(f"wrote {args.expected} ({len(updated)} expected failures)")
        return 0
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
else:
    # Collected by pytest or unittest: expose onnx's test cases (CPU variants) directly.
    globals().update(make_backend_test("cpu").test_cases)
