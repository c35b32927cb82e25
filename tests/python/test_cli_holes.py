"""The `kiln` command's holes of issue #46: "did you mean" for mistyped commands and options, -q hiding
the placement table, --timing-cache on a build that tunes nothing, `cache info` on a file that is not a
timing cache, and .npz inputs for run and compare (checked against the same arrays given as .npy)."""

from __future__ import annotations

import os
import subprocess
import zipfile

import numpy as np
import pytest
from onnx import TensorProto, helper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILN = os.environ.get("KILN_CLI") or os.path.join(REPO, "build", "kiln")
EXAMPLE = os.path.join(REPO, "examples", "tiny_cnn.onnx")


def kiln(*args, timeout=120):
    r = subprocess.run([KILN, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    assert r.returncode >= 0, f"kiln died of signal {-r.returncode}: {r.stderr[-500:]}"
    return r


@pytest.fixture(scope="module")
def two_inputs(tmp_path_factory):
    """z = x * y + 1 with x [2, 3] float and y [3] float."""
    g = helper.make_graph([helper.make_node("Mul", ["x", "y"], ["m"]), helper.make_node("Add", ["m", "one"], ["z"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    path = tmp_path_factory.mktemp("m") / "two.onnx"
    path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString())
    return path


# ---- did you mean


@pytest.mark.parametrize("args, hint", [
    (["buidl", EXAMPLE], "'buidl' is not a command: did you mean 'build'?"),
    (["compre", EXAMPLE], "did you mean 'compare'?"),
    (["cache", "ifno", "x"], "'ifno' is not a 'cache' command: did you mean 'info'?"),
    (["build", EXAMPLE, "--opt-levle", "1"], "unknown option '--opt-levle' for 'kiln build': did you mean '--opt-level'?"),
    (["run", EXAMPLE, "--iput", "x=a.npy"], "did you mean '--input'?"),
    (["bench", EXAMPLE, "--iteratons=3"], "did you mean '--iterations'?"),
])
def test_mistyped_commands_and_options_get_a_suggestion(args, hint):
    r = kiln(*args)
    assert r.returncode != 0 and hint in r.stderr, r.stderr


def test_no_suggestion_for_words_far_from_any_name():
    r = kiln("zzzzzzzz")
    assert r.returncode != 0 and "did you mean" not in r.stderr, r.stderr
    r = kiln("build", EXAMPLE, "--qqqqqqqqqq")
    assert r.returncode != 0 and "did you mean" not in r.stderr, r.stderr
    assert kiln("--version").returncode == 0


# ---- build: -q, --timing-cache without tuning


def test_quiet_hides_the_placement_table(tmp_path):
    r = kiln("build", EXAMPLE, "-o", tmp_path / "a.kiln")
    assert r.returncode == 0 and "placement:" in r.stdout, r.stdout + r.stderr
    r = kiln("build", EXAMPLE, "-o", tmp_path / "b.kiln", "-q")
    assert r.returncode == 0 and "placement:" not in r.stdout and "built " in r.stdout, r.stdout + r.stderr


def test_timing_cache_on_a_build_that_tunes_nothing_says_so(tmp_path):
    cache = tmp_path / "cache.txt"
    r = kiln("build", EXAMPLE, "-o", tmp_path / "a.kiln", "--timing-cache", cache, "-q")
    assert r.returncode == 0, r.stderr
    assert "tunes nothing" in r.stderr and "--tune" in r.stderr and not cache.exists(), r.stderr
    r = kiln("build", EXAMPLE, "-o", tmp_path / "b.kiln", "--timing-cache", cache, "--tune", "--opt-level", "1", "-q",
             "--tune-layer-seconds", "0.05")
    assert r.returncode == 0 and "tunes nothing" not in r.stderr and cache.exists(), r.stderr


# ---- cache info on other files


def test_cache_info_on_a_file_that_is_not_a_cache_says_what_it_is(tmp_path, two_inputs):
    r = kiln("cache", "info", two_inputs)
    assert r.returncode != 0 and "is not a kiln timing cache (it is an ONNX model" in r.stderr, r.stderr
    engine = tmp_path / "e.kiln"
    assert kiln("build", two_inputs, "-o", engine, "-q").returncode == 0
    r = kiln("cache", "info", engine)
    assert r.returncode != 0 and "is not a kiln timing cache (it is a kiln engine file)" in r.stderr, r.stderr
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    r = kiln("cache", "merge", empty, "-o", tmp_path / "m.txt")
    assert r.returncode != 0 and "(it is an empty file)" in r.stderr, r.stderr
    # A real cache whose body was damaged is still called damaged.
    damaged = tmp_path / "damaged.txt"
    damaged.write_text("kiln-timing-cache 1\ndevice cpu\n")
    r = kiln("cache", "info", damaged)
    assert r.returncode != 0 and "damaged" in r.stderr and "not a kiln timing cache" not in r.stderr, r.stderr


# ---- .npz inputs


def _outputs(tmp_path, name, model, *inputs):
    out = tmp_path / name
    r = kiln("run", model, *inputs, "--output-dir", out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "random data" not in r.stdout, r.stdout
    return np.load(out / "z.npy")


def test_npz_inputs_for_run_equal_npy_inputs(tmp_path, two_inputs):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    y = rng.standard_normal(3).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    np.savez(tmp_path / "both.npz", x=x, y=y)
    np.savez(tmp_path / "only_y.npz", y)  # one array, named arr_0
    want = _outputs(tmp_path, "npy", two_inputs, "-i", f"x={tmp_path / 'x.npy'}", "-i", f"y={tmp_path / 'y.npy'}")
    np.testing.assert_allclose(want, x * y + 1, rtol=1e-6)
    np.testing.assert_array_equal(_outputs(tmp_path, "all", two_inputs, "-i", tmp_path / "both.npz"), want)
    np.testing.assert_array_equal(
        _outputs(tmp_path, "named", two_inputs, "-i", f"x={tmp_path / 'both.npz'}", "-i", f"y={tmp_path / 'only_y.npz'}"), want)


def test_npz_inputs_for_compare(tmp_path, two_inputs):
    x = np.ones((2, 3), np.float32)
    np.savez(tmp_path / "in.npz", x=x, y=np.full(3, 2, np.float32))
    r = kiln("compare", two_inputs, two_inputs, "--device-b", "cpu", "-i", tmp_path / "in.npz")
    assert r.returncode == 0 and "random data" not in r.stdout, r.stdout + r.stderr


def test_zip64_npz_as_numpy_writes_it(tmp_path, two_inputs):
    """NumPy writes each member with a zip64 local header (force_zip64), as zipfile does here."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.ones(3, np.float32)
    path = tmp_path / "z64.npz"
    with zipfile.ZipFile(path, "w") as z:
        for name, a in (("x", x), ("y", y)):
            with z.open(name + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, a)
    np.testing.assert_array_equal(_outputs(tmp_path, "z64", two_inputs, "-i", path), x * y + 1)


def test_bad_npz_inputs_are_clear_errors(tmp_path, two_inputs):
    np.savez_compressed(tmp_path / "c.npz", x=np.ones((2, 3), np.float32), y=np.ones(3, np.float32))
    r = kiln("run", two_inputs, "-i", tmp_path / "c.npz")
    assert r.returncode != 0 and "compressed (np.savez_compressed)" in r.stderr and "np.savez" in r.stderr, r.stderr
    np.savez(tmp_path / "two.npz", a=np.ones(3, np.float32), b=np.ones(3, np.float32))
    r = kiln("run", two_inputs, "-i", f"y={tmp_path / 'two.npz'}")
    assert r.returncode != 0 and "has no array named 'y'" in r.stderr and "'a', 'b'" in r.stderr, r.stderr
    for i, junk in enumerate((b"PK\x05\x06" + b"\0" * 10, b"not a zip at all" * 4,
                              open(tmp_path / "two.npz", "rb").read()[:-30])):
        p = tmp_path / f"junk{i}.npz"
        p.write_bytes(junk)
        r = kiln("run", two_inputs, "-i", p)
        assert r.returncode == 1 and "kiln: error:" in r.stderr and str(p) in r.stderr, r.stderr
    # A member that is not a .npy inside: read_npy's own error, naming the archive and the array.
    with zipfile.ZipFile(tmp_path / "text.npz", "w") as z:
        z.writestr("x.npy", b"hello")
    r = kiln("run", two_inputs, "-i", tmp_path / "text.npz")
    assert r.returncode == 1 and "array 'x'" in r.stderr and "not a .npy file" in r.stderr, r.stderr
