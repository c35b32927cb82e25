"""`kiln bench`: --json figures (median, mean, percentiles, throughput), --streams N concurrent
contexts, --duration, and --device-io refused for CPU engines."""

from __future__ import annotations

import json
import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILN = os.path.join(REPO, "build", "kiln")
EXAMPLE = os.path.join(REPO, "examples", "tiny_cnn.onnx")


def bench(*args):
    r = subprocess.run([KILN, "bench", EXAMPLE, *args], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def test_json_and_streams(tmp_path):
    out = tmp_path / "b.json"
    code, text = bench("-n", "7", "--warmup", "1", "--streams", "3", "--json", str(out))
    assert code == 0, text
    assert "runs: 21 on 3 stream(s)" in text and "throughput" in text, text
    d = json.loads(out.read_text())
    assert d["runs"] == 21 and d["streams"] == 3 and d["batch"] == 1 and d["device"] == "cpu", d
    assert d["min_ms"] <= d["median_ms"] <= d["p90_ms"] <= d["p99_ms"] <= d["max_ms"], d
    assert d["min_ms"] <= d["mean_ms"] <= d["max_ms"], d
    # 21 runs in the timed window: the throughput follows from it.
    assert abs(d["throughput_runs_per_s"] - 21 / d["wall_s"]) < 1e-3 * d["throughput_runs_per_s"], d


def test_duration(tmp_path):
    out = tmp_path / "b.json"
    code, text = bench("--duration", "0.3", "--warmup", "0", "--json", str(out))
    assert code == 0, text
    d = json.loads(out.read_text())
    assert d["runs"] >= 1 and d["wall_s"] >= 0.3, d


def test_device_io_needs_a_cuda_engine():
    code, text = bench("--device-io", "-n", "1")
    assert code != 0 and "--device-io needs a CUDA engine" in text, text
