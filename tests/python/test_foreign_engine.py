"""Engines built for another machine of the same device kind (#45 step 1), from Python and the CLI.

The foreign engine is a CPU engine built here whose fingerprint ("cpu x86_64") is rewritten to another
machine's of the same length and re-sealed with the engine file's checksum (engine_checksum.py,
written out from its definition in src/util/checksum.cpp), as a file copied from that machine would read.
"""
import os
import struct
import subprocess

import numpy as np
import pytest

import kiln
from engine_checksum import checksum64

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILN = os.path.join(REPO, "build", "kiln")
EXAMPLE = os.path.join(REPO, "examples", "tiny_cnn.onnx")
EXAMPLE_INPUT = os.path.join(REPO, "examples", "tiny_cnn_input.npy")
def foreign_copy(engine_bytes: bytes, fingerprint: bytes = b"cpu x86_65") -> bytes:
    assert engine_bytes[-24:-16] == b"KILNSUM1"
    body = engine_bytes[:-24]
    assert body.count(b"cpu x86_64") == 1 and len(fingerprint) == len(b"cpu x86_64")
    body = body.replace(b"cpu x86_64", fingerprint)
    return body + b"KILNSUM1" + struct.pack("<QQ", checksum64(body), len(body))


@pytest.fixture()
def engines(tmp_path):
    built = kiln.Engine.build(EXAMPLE)
    path = tmp_path / "m.kiln"
    built.save(str(path))
    # The checksum written here agrees with kiln's own (else the test would prove nothing).
    data = path.read_bytes()
    assert struct.unpack("<Q", data[-16:-8])[0] == checksum64(data[:-24])
    path.write_bytes(foreign_copy(data))
    x = np.load(EXAMPLE_INPUT)
    want = built.create_context().run({"image": x})[0]
    return built, path, x, want


def test_refused_by_default_with_the_option_named(engines):
    _, path, _, _ = engines
    with pytest.raises(RuntimeError, match=r"cpu x86_65.*cpu x86_64.*on_mismatch = rebuild"):
        kiln.Engine.load(str(path))
    with pytest.raises(ValueError, match="rebuild-and-save"):
        kiln.Engine.load(str(path), on_mismatch="later")
    opts = kiln.SessionOptions()
    with pytest.raises(ValueError, match="kiln.on_mismatch"):
        opts.add_session_config_entry("kiln.on_mismatch", "always")


def test_rebuild_runs_the_same_and_leaves_the_file(engines):
    _, path, x, want = engines
    before = path.read_bytes()
    e = kiln.Engine.load(str(path), on_mismatch="rebuild")
    assert e.metadata()["rebuilt_from"] == "cpu x86_65"
    np.testing.assert_array_equal(e.create_context().run({"image": x})[0], want)
    assert path.read_bytes() == before
    assert sorted(os.listdir(path.parent)) == ["m.kiln"]


def test_session_option_rebuild_and_save(engines):
    _, path, x, want = engines
    opts = kiln.SessionOptions()
    opts.add_session_config_entry("kiln.on_mismatch", "rebuild-and-save")
    s = kiln.InferenceSession(str(path), opts)
    np.testing.assert_array_equal(s.run(None, {"image": x})[0], want)
    beside = kiln.Engine.rebuilt_path(str(path))
    assert os.path.dirname(beside) == str(path.parent) and os.path.isfile(beside)
    assert kiln.Engine.load(beside).metadata()["rebuilt_from"] == "cpu x86_65"
    with pytest.raises(RuntimeError, match="on_mismatch"):
        kiln.InferenceSession(str(path))  # the default stays an error


def test_engine_bytes_take_the_policy_too(engines):
    _, path, x, want = engines
    data = path.read_bytes()
    with pytest.raises(RuntimeError, match="on_mismatch"):
        kiln.InferenceSession(data)
    opts = kiln.SessionOptions()
    opts.add_session_config_entry("kiln.on_mismatch", "rebuild")
    np.testing.assert_array_equal(kiln.InferenceSession(data, opts).run(None, {"image": x})[0], want)
    e = kiln.Engine.load_from_bytes(data, on_mismatch="rebuild-and-save")  # nothing to keep beside
    assert e.metadata()["rebuilt_from"] == "cpu x86_65"
    assert sorted(os.listdir(path.parent)) == ["m.kiln"]


def test_cli_on_mismatch(engines, tmp_path):
    _, path, _, want = engines
    r = subprocess.run([KILN, "run", str(path), "-i", f"image={EXAMPLE_INPUT}"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "--on-mismatch rebuild" in r.stderr, r.stderr
    out = tmp_path / "out"
    r = subprocess.run([KILN, "run", str(path), "-i", f"image={EXAMPLE_INPUT}", "--on-mismatch", "rebuild", "--output-dir",
                        str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "rebuilt from its graph" in r.stderr and "cpu x86_65" in r.stderr, r.stderr
    got = [np.load(out / f) for f in sorted(os.listdir(out))]
    assert len(got) == 1
    np.testing.assert_array_equal(got[0], want)
    r = subprocess.run([KILN, "run", str(path), "--on-mismatch", "sometimes"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "on-mismatch" in r.stderr, r.stderr
