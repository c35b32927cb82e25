"""Precision as one concept (issue #39): int8 is a precision like fp8, spelled `--precision int8` (CLI),
precision="int8" (Python) and recorded as such in the engine; the older spellings (`--int8`, int8=True)
are aliases that give the same engine, with the rest of the engine in `precision` as they always did."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import onnx
import pytest

import kiln
from placement import ops_after as ops_of
from test_quantization import images, small_cnn

EXE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "build", "kiln")
NAMES = ["fp32", "fp16", "bf16", "tf32", "best", "fp8", "int8"]


def calibration(rng, n=4):
    return [{"x": images(rng, 4)} for _ in range(n)]


def test_precision_int8_is_the_int8_flag():
    rng = np.random.default_rng(21)
    m = small_cnn(rng).SerializeToString()
    calib = calibration(rng)
    new = kiln.Engine.build_from_bytes(m, precision="int8", calibration=calib)
    old = kiln.Engine.build_from_bytes(m, int8=True, calibration=calib)
    both = kiln.Engine.build_from_bytes(m, int8=True, precision="int8", calibration=calib)
    for e in (new, old, both):
        meta = e.metadata()
        assert meta["precision"] == "int8" and meta["rest_precision"] == "fp32", meta
        assert meta["int8.products"] == "3 of 3"
        assert ops_of(e)["QConv"] == 2
    x = images(rng, 5)
    want = old.create_context().run({"x": x})[0]
    np.testing.assert_array_equal(new.create_context().run({"x": x})[0], want)
    np.testing.assert_array_equal(both.create_context().run({"x": x})[0], want)
    assert new.serialize() == old.serialize()


def test_precision_names_and_their_errors():
    rng = np.random.default_rng(3)
    m = small_cnn(rng).SerializeToString()
    with pytest.raises(ValueError) as e:
        kiln.Engine.build_from_bytes(m, precision="int4")
    for name in NAMES:
        assert f"'{name}'" in str(e.value)
    with pytest.raises(kiln.KilnError, match="calibration data"):
        kiln.Engine.build_from_bytes(m, precision="int8")
    # A CPU engine's rest is float32; a float engine has no rest; the flag names its rest in `precision`.
    with pytest.raises(kiln.KilnError, match="GPU engines"):
        kiln.Engine.build_from_bytes(m, precision="int8", rest_precision="fp16", calibration=calibration(rng, 1))
    with pytest.raises(kiln.KilnError, match="8-bit precisions"):
        kiln.Engine.build_from_bytes(m, rest_precision="fp32")
    with pytest.raises(kiln.KilnError, match="precision int8"):
        kiln.Engine.build_from_bytes(m, int8=True, rest_precision="fp32", calibration=calibration(rng, 1))
    with pytest.raises(ValueError, match="rest_precision"):
        kiln.Engine.build_from_bytes(m, precision="int8", rest_precision="half")
    # Half outputs need float tensors that go half: refused for float32 engines (CPU int8's rest too).
    with pytest.raises(kiln.KilnError, match="half_outputs"):
        kiln.Engine.build_from_bytes(m, half_outputs=True)
    with pytest.raises(kiln.KilnError, match="half_outputs"):
        kiln.Engine.build_from_bytes(m, precision="int8", half_outputs=True, calibration=calibration(rng, 1))
    # A float32 engine records its precision and no rest.
    meta = kiln.Engine.build_from_bytes(m).metadata()
    assert meta["precision"] == "fp32" and "rest_precision" not in meta and "half_outputs" not in meta


def test_cli_precision_int8_gives_the_int8_engine(tmp_path):
    rng = np.random.default_rng(2)
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(rng), path)
    calib = tmp_path / "calib"
    calib.mkdir()
    for i in range(4):
        np.save(calib / f"set{i}.npy", images(rng, 2))
    engines = {}
    for spelling in (["--precision", "int8"], ["--int8"], ["--precision", "int8", "--rest-precision", "fp32"]):
        out = tmp_path / f"cnn{len(engines)}.kiln"
        r = subprocess.run([EXE, "build", str(path), "-o", str(out), *spelling, "--calibration", str(calib), "-q"],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert "int8: 3 of 3 products in 8 bits; activation ranges from minmax, 4 input sets" in r.stdout, r.stdout
        assert "accuracy against a float32 engine" in r.stdout, r.stdout
        engines[" ".join(spelling)] = kiln.Engine.load(str(out))
    x = images(rng, 3)
    outs = [e.create_context().run({"x": x})[0] for e in engines.values()]
    for got in outs[1:]:
        np.testing.assert_array_equal(got, outs[0])
    assert len({e.serialize() for e in engines.values()}) == 1
    # --help names the new spelling; an unknown name is refused by the CLI.
    h = subprocess.run([EXE, "build", "--help"], capture_output=True, text=True)
    assert "--rest-precision" in h.stdout and "int8" in h.stdout and "deprecated" in h.stdout
    r = subprocess.run([EXE, "build", str(path), "--precision", "int4"], capture_output=True, text=True)
    assert r.returncode != 0


def test_provider_precision_int8_says_how_to_build_it():
    with pytest.raises(ValueError, match="calibration"):
        kiln._cuda_settings({"precision": "int8"})
