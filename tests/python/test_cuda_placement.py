"""CUDA placement, planned without a GPU (`kiln build/conform --placement-only`), against what the H100
did: every node test the committed GPU run (tests/conformance/cuda_node_h100.jsonl) passed wholly on
the GPU must be planned wholly on the GPU here, and every one that ran some step on the CPU must be
planned so — the plan is the one a GPU build makes. Also a floor on the count, so a kernel row that
stops accepting its nodes fails CI on a machine without a GPU."""

from __future__ import annotations

import json
import os
import subprocess

import onnx
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILN = os.path.join(REPO, "build", "kiln")
NODE = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
H100 = os.path.join(REPO, "tests", "conformance", "cuda_node_h100.jsonl")


def planned(tmp_path):
    out = tmp_path / "placed.jsonl"
    r = subprocess.run([KILN, "conform", NODE, "--device", "cuda", "--placement-only", "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    if "built without CUDA" in r.stdout + r.stderr:
        pytest.skip("this kiln was built without CUDA")
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {r["name"]: r for r in rows}, r.stdout


def test_placement_plan_matches_the_h100_run(tmp_path):
    plan, summary = planned(tmp_path)
    with open(H100, encoding="utf-8") as f:
        gpu = [json.loads(line) for line in f if line.strip()]
    checked = 0
    for row in gpu:
        want = {"pass": "placed", "pass-fallback": "placed-fallback"}.get(row["outcome"])
        if want is None or row["name"] not in plan:
            continue  # failed or errored on the GPU (as on the CPU), or a test this onnx does not ship
        got = plan[row["name"]]
        assert got["outcome"] == want, (row["name"], got, row)
        assert got["cpu_steps"] == row["cpu_steps"], (row["name"], got, row)
        checked += 1
    assert checked > 1500, summary


def test_placement_floor(tmp_path):
    plan, summary = planned(tmp_path)
    placed = sum(r["outcome"] == "placed" for r in plan.values())
    # 1604 planned on the GPU when this test was written (1602 of them pass there; 90.8% of 1765).
    assert placed >= 1604, summary


def test_build_placement_only_lists_every_node(tmp_path):
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("StringNormalizer", ["s"], ["t"])]
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
                           helper.make_tensor_value_info("s", TensorProto.STRING, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
                           helper.make_tensor_value_info("t", TensorProto.STRING, [2])])
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString())
    r = subprocess.run([KILN, "build", str(path), "--device", "cuda", "--placement-only"], capture_output=True, text=True,
                       timeout=60)
    if "built without CUDA" in r.stdout + r.stderr:
        pytest.skip("this kiln was built without CUDA")
    assert r.returncode == 0, r.stderr
    assert "[cuda]" in r.stdout and "(Relu)" in r.stdout, r.stdout
    assert "[cpu]" in r.stdout and "(StringNormalizer)" in r.stdout and "no CUDA kernel" in r.stdout, r.stdout
    assert not path.with_suffix(".kiln").exists()  # nothing written


def test_stem_is_one_conv_pool_step(tmp_path):
    """An image network's stem (Conv 3→64 7x7/2, Relu, MaxPool 3x3/2) in a float16 CUDA engine is one
    kiln.ConvPool step reading the float32 input (the Cast and Transpose before it folded in);
    --disable-pass fuse-conv-max-pool keeps the separate steps; a 16-channel input is not a stem."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    def placement(channels, disabled=()):
        rng = np.random.default_rng(0)
        inits = [numpy_helper.from_array(rng.standard_normal((64, channels, 7, 7)).astype(np.float32), "w"),
                 numpy_helper.from_array(rng.standard_normal((32, 64, 1, 1)).astype(np.float32), "w2")]
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[7, 7], strides=[2, 2], pads=[3, 3, 3, 3]),
                 helper.make_node("Relu", ["c"], ["r"]),
                 helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                 helper.make_node("Conv", ["p", "w2"], ["y"], kernel_shape=[1, 1])]
        g = helper.make_graph(nodes, "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, channels, 64, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
        path = tmp_path / f"stem{channels}.onnx"
        path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString())
        r = subprocess.run([KILN, "build", str(path), "--device", "cuda", "--precision", "fp16", "--placement-only",
                            *[a for name in disabled for a in ("--disable-pass", name)]],
                           capture_output=True, text=True, timeout=60)
        if "built without CUDA" in r.stdout + r.stderr:
            pytest.skip("this kiln was built without CUDA")
        assert r.returncode == 0, r.stderr
        return r.stdout

    fused = placement(3)
    assert "(ConvPool) -> cuda.kiln.ConvPool" in fused, fused
    assert "(Cast)" not in fused.split("(ConvPool)")[0] and "(Transpose)" not in fused.split("(ConvPool)")[0], fused
    assert "ChannelsLastPool" not in fused, fused
    separate = placement(3, ["fuse-conv-max-pool"])
    assert "ConvPool" not in separate and "(ChannelsLastPool)" in separate, separate
    assert "ConvPool" not in placement(16)
