"""Model zoo agreement: kiln's CPU outputs against ONNX Runtime's on real exporters' models.

For every zoo model present in build/zoo/ (bench/zoo/export.py makes them), both runtimes run
the same seeded random inputs at batch 1 and batch 2 (the exported batch axis is dynamic); each
output must agree within a relative L2 error of 1e-5 (a model's own bound where fp32 rounding alone
goes further: see bench/zoo/zoo.py) and hold no NaN. A model not exported is
skipped with the command that exports it. Each figure is also written to build/zoo/agreement.json.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import zoo

ort = pytest.importorskip("onnxruntime")
kiln = pytest.importorskip("kiln")

BATCHES = (1, 2)
CASES = [(m, o, b) for m in zoo.MODELS for o in zoo.OPSETS for b in BATCHES]
AGREEMENT = os.path.join(zoo.ZOO_DIR, "agreement.json")

_sessions: dict = {}  # holds the sessions of one model at a time (the big ones take GBs)


def sessions(path: str):
    if path not in _sessions:
        _sessions.clear()
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        _sessions[path] = (
            kiln.InferenceSession(path, providers=["CPUExecutionProvider"]),
            ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]),
        )
    return _sessions[path]


def rel_l2(got: np.ndarray, want: np.ndarray) -> float:
    got = got.astype(np.float64)
    want = want.astype(np.float64)
    den = np.linalg.norm(want)
    num = np.linalg.norm(got - want)
    return float(num / den) if den > 0 else float(num)


def record(key: str, errors: dict) -> None:
    data = {}
    if os.path.exists(AGREEMENT):
        try:
            with open(AGREEMENT) as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = {}
    data[key] = errors
    with open(AGREEMENT, "w") as f:
        json.dump(dict(sorted(data.items())), f, indent=2)


@pytest.mark.parametrize("name,opset,batch", CASES, ids=[f"{m}-op{o}-b{b}" for m, o, b in CASES])
def test_matches_onnxruntime(name: str, opset: int, batch: int) -> None:
    path = zoo.model_path(name, opset)
    if not os.path.exists(path):
        pytest.skip(f"{name} (opset {opset}) not exported; make it with: {zoo.export_command(name, opset)}")
    spec = zoo.MODELS[name]
    k_sess, o_sess = sessions(path)
    feed = zoo.make_inputs(spec, batch, seed=batch)
    want = o_sess.run(None, feed)
    got = k_sess.run(None, feed)
    names = [o.name for o in o_sess.get_outputs()]
    assert [o.name for o in k_sess.get_outputs()] == names
    errors = {}
    for out_name, g, w in zip(names, got, want):
        assert g.shape == w.shape, f"{out_name}: kiln shape {g.shape}, onnxruntime {w.shape}"
        assert g.dtype == w.dtype, f"{out_name}: kiln dtype {g.dtype}, onnxruntime {w.dtype}"
        assert not np.isnan(g).any(), f"{out_name}: kiln output has NaN"
        errors[out_name] = rel_l2(g, w)
    record(f"{name}_op{opset}_b{batch}", errors)
    bad = {k: v for k, v in errors.items() if not v <= spec.rel_l2}
    assert not bad, f"relative L2 error above {spec.rel_l2}: {bad}"


# Engine core: every zoo model's engine plans its memory at build time (a non-zero arena for the
# declared shapes, dynamic dims at 1, as `kiln build` prints it), and its engine file loads without
# lowering or passes — fast: a ResNet-50 engine in at most 100 ms here (2-core CI machine).
LOAD_MS_LIMIT = {"resnet50": 100.0}


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_engine_plans_an_arena_and_loads_fast(name: str, tmp_path) -> None:
    import re
    import time

    path = zoo.model_path(name, 17)
    if not os.path.exists(path):
        pytest.skip(f"{name} (opset 17) not exported; make it with: {zoo.export_command(name, 17)}")
    engine = kiln.Engine.build(path)
    report = engine.placement_report()
    m = re.search(r"^arena: cpu (\d+) bytes", report, re.M)
    assert m and int(m.group(1)) > 0, f"no arena planned at build: {report.splitlines()[-1]}"
    file = tmp_path / f"{name}.kiln"
    engine.save(str(file))
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        loaded = kiln.Engine.load(str(file))
        times.append((time.perf_counter() - t0) * 1e3)
        del loaded
    load_ms = min(times)
    record(f"{name}_engine", {"arena_cpu_bytes": int(m.group(1)), "load_ms": round(load_ms, 2),
                              "file_bytes": file.stat().st_size})
    limit = LOAD_MS_LIMIT.get(name)
    if limit is not None:
        assert load_ms <= limit, f"{name} engine took {load_ms:.1f} ms to load (limit {limit} ms)"
