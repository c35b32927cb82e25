"""FP8 builds (`--precision fp8`): MatMul/Gemm with constant weights become kiln.F8MatMul with E4M3
activations and weights and per-tensor scales from calibration data (builder/calibrate.cpp). On a
CUDA engine they run on Hopper's FP8 tensor cores; a CPU engine emulates them in float32, which is
what these tests run (the CUDA kernel is checked against the same reference in tests/unit/test_f8.cpp
and on the GPU by tests/gpu/fp8_check.sh).

The emulation must equal an independent NumPy computation of the same quantization (ml_dtypes'
float8_e4m3fn) to float32 rounding; the whole build must stay within FP8's accuracy of float32."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln
from placement import ops_after as ops_of

ml_dtypes = pytest.importorskip("ml_dtypes")

EXE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "build", "kiln")


def model(nodes, inits, x_shape, y_shape):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                          initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def e4m3(v):
    """float32 → E4M3 (nearest even, saturating at ±448) → float32, as kiln quantizes."""
    return np.clip(v, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)


def build_fp8(m, calib, **kw):
    kw.setdefault("opt_level", 2)  # with the fusions (the activation into the F8MatMul)
    return kiln.Engine.build_from_bytes(m.SerializeToString(), precision="fp8",
                                        calibration=[{"x": c} for c in calib], **kw)


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_fp8_matmul_add_equals_numpy_emulation():
    rng = np.random.default_rng(3)
    K, N = 64, 48
    w = rng.standard_normal((K, N)).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    # MatMul + Add + LeakyRelu: bias and activation both fused into the F8MatMul (an activation applied
    # twice, or the bias lost, would show).
    m = model([helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["s"]),
               helper.make_node("LeakyRelu", ["s"], ["y"], alpha=0.1)],
              {"w": w, "b": b}, ["N", 5, K], ["N", 5, N])
    calib = [rng.standard_normal((2, 5, K)).astype(np.float32) * 3 for _ in range(3)]
    e = build_fp8(m, calib)
    counts = ops_of(e)
    assert counts["F8MatMul"] == 1 and counts["MatMul"] + counts["Add"] + counts["LeakyRelu"] == 0, counts
    assert e.metadata()["fp8.products"] == "1 of 1"
    assert e.metadata()["precision"] == "fp8"
    # The scales kiln derives: amax / 448 of the calibrated activation and of the weights.
    a_scale = np.float32(max(float(np.max(np.abs(c))) for c in calib) / 448.0)
    b_scale = np.float32(float(np.max(np.abs(w))) / 448.0)
    b8 = e4m3((w / b_scale).astype(np.float32))
    x = rng.standard_normal((3, 5, K)).astype(np.float32) * 4  # some values past the range: saturate
    a8 = e4m3(x * (np.float32(1) / a_scale))
    pre = (a8.astype(np.float64) @ b8.astype(np.float64)) * (float(a_scale) * float(b_scale)) + b
    want = np.where(pre >= 0, pre, 0.1 * pre)
    got = e.create_context().run({"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(np.max(np.abs(want))))
    # And it is FP8: close to float32, not equal.
    f = x @ w + b
    assert 0 < rel_l2(got, np.where(f >= 0, f, 0.1 * f)) < 0.08


def mlp(rng):
    """MatMul+Add → Relu → Gemm(transB, C) → Relu → MatMul [32, 20] (N = 20, not a multiple of 16: stays
    float) → MatMul [20, 16] (K = 20: stays float) → y."""
    inits = {"w0": rng.standard_normal((32, 64)).astype(np.float32) * 0.3,
             "b0": rng.standard_normal(64).astype(np.float32) * 0.1,
             "w1": rng.standard_normal((32, 64)).astype(np.float32) * 0.2,  # [N, K]: transB
             "b1": rng.standard_normal(32).astype(np.float32) * 0.1,
             "w2": rng.standard_normal((32, 20)).astype(np.float32) * 0.3,
             "w3": rng.standard_normal((20, 16)).astype(np.float32) * 0.3}
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["t0"]), helper.make_node("Add", ["b0", "t0"], ["a0"]),
             helper.make_node("Relu", ["a0"], ["r0"]),
             helper.make_node("Gemm", ["r0", "w1", "b1"], ["t1"], transB=1), helper.make_node("Relu", ["t1"], ["r1"]),
             helper.make_node("MatMul", ["r1", "w2"], ["t2"]), helper.make_node("MatMul", ["t2", "w3"], ["y"])]
    return model(nodes, inits, ["N", 32], ["N", 16])


def test_fp8_build_quantizes_the_products_that_fit_and_stays_close():
    rng = np.random.default_rng(5)
    m = mlp(rng)
    calib = [rng.standard_normal((8, 32)).astype(np.float32) for _ in range(4)]
    e = build_fp8(m, calib)
    counts = ops_of(e)
    # MatMul+Add, Gemm and the [32, 20] MatMul (K = 32, N = 20: N not a multiple of 16 stays float).
    assert counts["F8MatMul"] == 2, counts
    meta = e.metadata()
    assert meta["fp8.products"] == "2 of 2"
    assert float(meta["fp8.rel_l2.y"]) < 0.1
    ref = kiln.Engine.build_from_bytes(m.SerializeToString())
    x = rng.standard_normal((16, 32)).astype(np.float32)
    got = e.create_context().run({"x": x})[0]
    want = ref.create_context().run({"x": x})[0]
    assert 0 < rel_l2(got, want) < 0.1, rel_l2(got, want)
    # The engine file keeps the FP8 plan and gives the same bits.
    e2 = kiln.Engine.load_from_bytes(e.serialize())
    assert ops_of(e2)["F8MatMul"] == 2
    np.testing.assert_array_equal(e2.create_context().run({"x": x})[0], got)


def test_fp8_engine_with_a_fixed_batch_calibrates_on_smaller_sets():
    # A batch-16 engine (min = opt = max) from calibration sets of 8 rows: calibration and the build's
    # check run at the sets' batch; the profile shapes the engine.
    rng = np.random.default_rng(7)
    m = mlp(rng)
    calib = [rng.standard_normal((8, 32)).astype(np.float32) for _ in range(4)]
    e = build_fp8(m, calib, profiles=[{"x": ([16, 32], [16, 32], [16, 32])}])
    assert e.metadata()["fp8.products"] == "2 of 2"
    x = rng.standard_normal((16, 32)).astype(np.float32)
    got = e.create_context().run({"x": x})[0]
    want = kiln.Engine.build_from_bytes(m.SerializeToString()).create_context().run({"x": x})[0]
    assert 0 < rel_l2(got, want) < 0.1, rel_l2(got, want)


def test_fp8_accuracy_budget_keeps_the_most_sensitive_product_in_float():
    rng = np.random.default_rng(6)
    m = mlp(rng)
    calib = [rng.standard_normal((8, 32)).astype(np.float32) for _ in range(4)]
    full = build_fp8(m, calib)
    ref = kiln.Engine.build_from_bytes(m.SerializeToString())
    want = [ref.create_context().run({"x": c})[0] for c in calib]

    def measured(e):
        got = [e.create_context().run({"x": c})[0] for c in calib]
        num = sum(float(np.sum((g.astype(np.float64) - w) ** 2)) for g, w in zip(got, want))
        return (num / sum(float(np.sum(w.astype(np.float64) ** 2)) for w in want)) ** 0.5

    err = measured(full)
    assert err > 0
    # Each product alone in FP8 costs less than both together: a budget just under the all-FP8 error
    # keeps one of them (the more sensitive) in float.
    budget = err * 0.9
    e = build_fp8(m, calib, accuracy_budget=budget)
    meta = e.metadata()
    layers = [line.split() for line in meta["fp8.layers"].splitlines()]
    assert len(layers) == 2 and {p for _, _, p, _ in layers} == {"fp8", "fp32"}, layers
    sens = {name: float(s) for name, _, _, s in layers}
    kept = [name for name, _, p, _ in layers if p == "fp32"]
    assert sens[kept[0]] == max(sens.values())
    assert measured(e) <= budget * (1 + 1e-6), (measured(e), budget)
    assert ops_of(e)["F8MatMul"] == 1


def test_fp8_errors_are_clear(tmp_path):
    rng = np.random.default_rng(1)
    m = mlp(rng)
    with pytest.raises(kiln.KilnError, match="calibration data"):
        kiln.Engine.build_from_bytes(m.SerializeToString(), precision="fp8")
    with pytest.raises(kiln.KilnError, match="INT8 or FP8, not both"):
        kiln.Engine.build_from_bytes(m.SerializeToString(), precision="fp8", int8=True,
                                     calibration=[{"x": rng.standard_normal((2, 32)).astype(np.float32)}])
    path = tmp_path / "mlp.onnx"
    onnx.save(m, path)
    calib = tmp_path / "calib"
    calib.mkdir()
    for i in range(3):
        np.save(calib / f"set{i}.npy", rng.standard_normal((4, 32)).astype(np.float32))
    out = tmp_path / "mlp.kiln"
    r = subprocess.run([EXE, "build", str(path), "-o", str(out), "--precision", "fp8", "--calibration", str(calib)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "fp8: 2 of 2 products in 8 bits; activation ranges from minmax, 3 input sets" in r.stdout, r.stdout
    assert "F8MatMul" in r.stdout
    assert ops_of(kiln.Engine.load(str(out)))["F8MatMul"] == 2
