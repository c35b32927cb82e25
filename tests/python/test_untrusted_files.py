"""Calibration data and caches that cannot be turned against the user (issue 50): degenerate
statistics and forged cache ranges are errors naming the tensor, the calibration cache is never
written through a planted symlink, and the CPU activations keep NaN/±inf as the ONNX reference does."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import kiln
from test_quantization import build_int8, images, small_cnn


def test_all_nan_calibration_data_is_refused_naming_the_tensor():
    m = small_cnn(np.random.default_rng(3))
    nan = np.full((2, 3, 12, 12), np.nan, np.float32)
    with pytest.raises(kiln.KilnError, match=r"tensor 'x' had no finite values"):
        build_int8(m, [nan, nan])
    inf = np.full((2, 3, 12, 12), np.inf, np.float32)
    with pytest.raises(kiln.KilnError, match=r"tensor 'x' had no finite values"):
        build_int8(m, [inf])


@pytest.mark.parametrize("forged,want", [("1e300", "beyond"), ("nan", "invalid range"), ("inf", "invalid range"),
                                         ("-5", "invalid range")])
def test_forged_calibration_cache_ranges_are_refused_naming_the_tensor(tmp_path, forged, want):
    rng = np.random.default_rng(5)
    m = small_cnn(rng)
    cache = tmp_path / "calib.txt"
    build_int8(m, [images(rng, 2)], calibration_cache=str(cache))
    lines = cache.read_text().splitlines()
    # "<len> <name> <lo> <hi>": the first tensor's max becomes the forged value.
    parts = lines[1].split(" ")
    name = parts[1]
    parts[-1] = forged
    lines[1] = " ".join(parts)
    cache.write_text("\n".join(lines) + "\n")
    with pytest.raises(kiln.KilnError, match=f"tensor '{name}'.*{want}"):
        kiln.Engine.build_from_bytes(m.SerializeToString(), int8=True, calibration_cache=str(cache))


def test_calibration_cache_is_not_written_through_a_symlink(tmp_path):
    rng = np.random.default_rng(6)
    m = small_cnn(rng)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    cache = tmp_path / "calib.txt"
    os.symlink(victim, cache)
    os.symlink(victim, str(cache) + ".tmp")
    build_int8(m, [images(rng, 2)], calibration_cache=str(cache))
    assert victim.read_text() == "keep me"
    assert not cache.is_symlink() and cache.read_text().startswith("kiln-calibration 1 ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calib.txt", "calib.txt.tmp", "victim.txt"]


SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -1.0, 2.0, 0.3, -0.3], np.float32)


@pytest.mark.parametrize("op,attrs", [
    ("Relu", {}), ("Celu", {}), ("HardSigmoid", {}), ("HardSwish", {}), ("LeakyRelu", {}), ("Elu", {}),
    ("Selu", {}), ("ThresholdedRelu", {}), ("Shrink", {"lambd": 0.5, "bias": 0.1}), ("Softplus", {}),
    ("Mish", {}), ("Softsign", {}), ("Sigmoid", {}), ("Tanh", {}), ("Gelu", {}),
])
def test_cpu_activations_keep_nan_and_inf_as_the_onnx_reference(op, attrs):
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [SPECIAL.size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [SPECIAL.size])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # inf - inf and the like, as intended
        want = ReferenceEvaluator(m).run(None, {"x": SPECIAL})[0]
    got = kiln.Engine.build_from_bytes(m.SerializeToString()).create_context().run({"x": SPECIAL})[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{op}: NaN where the reference has none, or none where it has")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=op)
