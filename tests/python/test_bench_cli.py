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


def _task_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def _most_threads_while_benching(model: str, threads: int) -> int:
    """Runs `kiln bench --threads N` for about 1.5 s and returns the most threads its process had."""
    import time  # noqa: PLC0415

    p = subprocess.Popen([KILN, "bench", model, "--threads", str(threads), "--duration", "1.5", "--warmup", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    most = 0
    while p.poll() is None:
        most = max(most, _task_count(p.pid))
        time.sleep(0.05)
    out = p.stdout.read()
    assert p.returncode == 0, out
    return most


def test_threads_option_sets_the_runs_thread_count(tmp_path):
    """--threads N is the thread count of the engine's build and runs: with 1 the process never starts
    another thread (not while building either: folding the constant product below is parallel work);
    with 3 it runs with (at least) two more."""
    import numpy as np  # noqa: PLC0415
    from onnx import TensorProto, helper, numpy_helper  # noqa: PLC0415

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((512, 512)).astype(np.float32), "w")
    c = numpy_helper.from_array(rng.standard_normal((256, 512)).astype(np.float32), "c")
    g = helper.make_graph([helper.make_node("MatMul", ["c", "w"], ["cw"]), helper.make_node("MatMul", ["x", "w"], ["h"]),
                           helper.make_node("Add", ["h", "cw"], ["s"]), helper.make_node("Relu", ["s"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 512])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[w, c])
    model = tmp_path / "mm.onnx"
    model.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString())
    one, three = _most_threads_while_benching(str(model), 1), _most_threads_while_benching(str(model), 3)
    assert one == 1 and three >= 3, (one, three)
