"""`kiln compare`: outputs are matched by name (two exports of one model may list them in another
order), so a reordering is no mismatch while a changed output still is."""

from __future__ import annotations

import os
import subprocess

import numpy as np
from onnx import TensorProto, helper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILN = os.path.join(REPO, "build", "kiln")


def model(path, outputs, z_op="Neg"):
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node(z_op, ["x"], ["z"])]
    vi = {n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("y", "z")}
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [vi[n] for n in outputs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path.write_bytes(m.SerializeToString())
    return str(path)


def compare(a, b, tmp_path):
    # No --device-b: two models are compared on side A's device (the CPU here), no GPU needed.
    x = tmp_path / "x.npy"
    np.save(x, np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3))
    r = subprocess.run([KILN, "compare", a, b, "--device-a", "cpu", "--input", f"x={x}"],
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def test_reordered_outputs_match_by_name(tmp_path):
    code, out = compare(model(tmp_path / "a.onnx", ["y", "z"]), model(tmp_path / "b.onnx", ["z", "y"]), tmp_path)
    assert code == 0, out
    assert out.count(" OK") == 2 and "MISMATCH" not in out, out


def test_a_changed_output_is_still_a_mismatch(tmp_path):
    code, out = compare(model(tmp_path / "a.onnx", ["y", "z"]), model(tmp_path / "b.onnx", ["z", "y"], z_op="Abs"),
                        tmp_path)
    assert code == 2, out
    assert "z: float32 [2,3]" in out and "MISMATCH" in out and "y: float32 [2,3]" in out, out


def test_compare_against_onnxruntime(tmp_path):
    """`kiln compare M --against onnxruntime` (polygraphy's check): per output by name, max abs/rel error,
    the first element outside atol + rtol * |ref|, exit 0 when all pass and 2 when one does not."""
    import sys

    env = dict(os.environ, KILN_PYTHON=sys.executable)
    example = os.path.join(REPO, "examples", "tiny_cnn.onnx")
    image = os.path.join(REPO, "examples", "tiny_cnn_input.npy")
    r = subprocess.run([KILN, "compare", example, "--against", "onnxruntime", "-i", f"image={image}"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "onnxruntime" in r.stdout and "probabilities" in r.stdout and "PASSED" in r.stdout
    # A real difference: RandomUniform (seeded) draws from each runtime's own generator.
    g = helper.make_graph([helper.make_node("RandomUniform", [], ["r"], shape=[2, 3], seed=1.0),
                           helper.make_node("Add", ["r", "x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    a = tmp_path / "rand.onnx"
    a.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString())
    r = subprocess.run([KILN, "compare", str(a), "--against", "onnxruntime"], capture_output=True, text=True, timeout=300,
                       env=env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "y: float32 [2,3]" in r.stdout and "first at [0,0]" in r.stdout and "FAILED" in r.stdout
    # A Python without onnxruntime: a clear error, not a crash.
    r = subprocess.run([KILN, "compare", a, "--against", "onnxruntime"], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, KILN_PYTHON="/nonexistent/python"))
    assert r.returncode == 1 and "KILN_PYTHON" in r.stderr
