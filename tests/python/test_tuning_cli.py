"""Tuning from the command line and Python: `kiln build --tune` with shape profiles and a timing cache,
`kiln inspect` on the engine (the chosen tactics), `kiln cache merge/info`, progress lines, and the
same options through kiln.Engine.build. CPU engines at opt level 1, where the model's convolutions stay
plain channels-first Convs that offer their batch schedules as tactics at batch > 1 (level 2, the
default, runs them fused and channels-last: tests/unit/test_tuning.cpp's ChannelsLastConvolutionTactics);
the CUDA side runs on the GPU machine (tests/gpu/tuning_check.sh)."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILN = os.path.join(REPO, "build", "kiln")
EXAMPLE = os.path.join(REPO, "examples", "tiny_cnn.onnx")


def kiln(*args, timeout=120):
    r = subprocess.run([KILN, *args], capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def depthwise_model(path):
    """A depthwise convolution (its tactics: the row-wise kernel or im2col) and a dynamic batch."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 1, 3, 3)).astype(np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=8, pads=[1, 1, 1, 1])
    g = helper.make_graph([node], "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path.write_bytes(m.SerializeToString())
    return str(path)


def test_build_tunes_and_inspect_shows_tactics(tmp_path):
    engine = tmp_path / "m.kiln"
    cache = tmp_path / "cache.txt"
    code, out, err = kiln("build", EXAMPLE, "-o", str(engine), "--opt-level", "1", "--tune", "--timing-cache", str(cache),
                          "--min-shapes", "image:1x3x32x32", "--opt-shapes", "image:4x3x32x32", "--max-shapes", "image:8x3x32x32",
                          "-v")
    assert code == 0, out + err
    # -v prints each tuned layer's candidates with their times and the choice.
    assert len([line for line in err.splitlines() if "jobs-parallel" in line and "jobs-serial" in line and "->" in line]) == 3, err
    # Progress lines on a pipe: the stages in order.
    stages = [s for s in ("] optimize", "] lower", "] tune", "] built") if s in err]
    assert stages == ["] optimize", "] lower", "] tune", "] built"], err
    code, out, err = kiln("inspect", str(engine))
    assert code == 0, out + err
    assert "profile 0:" in out and "image: min 1x3x32x32 opt 4x3x32x32 max 8x3x32x32" in out, out
    assert out.count("{tactic ") == 4, out  # three convolutions and the Gemm
    code, out, err = kiln("cache", "info", str(cache))
    # Convolutions: 3 tactics each (4 with Winograd on AVX-512); the Gemm: onednn, sgemm, and packed
    # where the CPU has AVX2 and FMA.
    want = 9 + winograd_tactics(out) + gemm_tactics(out)
    assert code == 0 and "layers: 4" in out and f"measurements: {want}" in out, out + err
    # The engine runs a batch inside the profile and refuses one outside, naming the input.
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((9, 3, 32, 32), np.float32))
    code, out, err = kiln("run", str(engine), "--input", f"image={x}")
    assert code != 0 and "'image'" in err and "[9,3,32,32]" in err and "[1,3,32,32]..[8,3,32,32]" in err, out + err


def test_quiet_and_fixed_shapes(tmp_path):
    engine = tmp_path / "m.kiln"
    code, out, err = kiln("build", EXAMPLE, "-o", str(engine), "--shapes", "image:2x3x32x32", "--quiet")
    assert code == 0, out + err
    assert "] optimize" not in err, err
    code, out, err = kiln("inspect", str(engine))
    assert "image: min 2x3x32x32 opt 2x3x32x32 max 2x3x32x32" in out, out


@pytest.mark.parametrize("args, want", [
    (["--shapes", "image:1x3xAx32"], "non-negative integers"),
    (["--shapes", "image"], "is not name:dims"),
    (["--min-shapes", "image:1x3x32x32", "--opt-shapes", "image:1x3x32x32"], "needs --min-shapes, --opt-shapes and --max-shapes"),
    (["--shapes", "nope:1x3x32x32"], "'nope', which is not an input"),
    (["--min-shapes", "image:4x3x32x32", "--opt-shapes", "image:2x3x32x32", "--max-shapes", "image:8x3x32x32"], "min <= opt <= max"),
])
def test_bad_shape_options_are_clear_errors(tmp_path, args, want):
    code, out, err = kiln("build", EXAMPLE, "-o", str(tmp_path / "m.kiln"), *args)
    assert code != 0 and want in err, out + err


def cache_device(cache_info: str) -> str:
    """The `device:` line of `kiln cache info`: the machine (and its CPU features) the cache was timed on."""
    return next(line for line in cache_info.splitlines() if line.startswith("device:"))


def gemm_tactics(cache_info: str) -> int:
    """The Gemm's tactics on the machine a cache names: onednn, sgemm, and packed with AVX2 and FMA."""
    device = cache_device(cache_info)
    return 3 if " avx2" in device and " fma" in device else 2


def winograd_tactics(cache_info: str) -> int:
    """The example's three 3x3 convolutions each add oneDNN's Winograd algorithm where oneDNN dispatches
    to AVX-512 (the device line names oneDNN's effective ISA)."""
    device = cache_device(cache_info)
    return 3 if " onednn:avx512" in device else 0


def test_cache_merge(tmp_path):
    a, b, c = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "c.txt"
    for cache, opt in ((a, "4"), (b, "6")):
        code, out, err = kiln("build", EXAMPLE, "-o", str(tmp_path / "m.kiln"), "--opt-level", "1", "--tune",
                              "--timing-cache", str(cache), "-q",
                              "--min-shapes", "image:1x3x32x32", "--opt-shapes", f"image:{opt}x3x32x32",
                              "--max-shapes", "image:8x3x32x32")
        assert code == 0, out + err
    code, out, err = kiln("cache", "merge", str(a), str(b), "-o", str(c))
    assert code == 0 and "layers: 8" in out and f"measurements: {2 * (9 + winograd_tactics(out) + gemm_tactics(out))}" in out, out + err
    c.write_text(c.read_text().replace("jobs-serial", "jobs-serail", 1))
    code, out, err = kiln("cache", "info", str(c))
    assert code != 0 and "damaged" in err, out + err


def test_python_build_options(tmp_path):
    import kiln as k

    path = depthwise_model(tmp_path / "dw.onnx")
    cache = str(tmp_path / "cache.txt")
    e = k.Engine.build(path, opt_level=1, tune=True, timing_cache=cache,
                       profiles=[{"x": ((1, 8, 16, 16), (1, 8, 16, 16), (2, 8, 16, 16))},
                                 {"x": ((3, 8, 16, 16), (4, 8, 16, 16), (8, 8, 16, 16))}])
    assert e.profiles[1]["x"] == ([3, 8, 16, 16], [4, 8, 16, 16], [8, 8, 16, 16])
    ctx = e.create_context()
    x = np.random.default_rng(1).standard_normal((4, 8, 16, 16)).astype(np.float32)
    (y,) = ctx.run({"x": x})
    assert ctx.active_profile == 1
    ref = k.Engine.build(path, opt_level=1, tune=False).create_context().run({"x": x})[0]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="outside every shape profile"):
        ctx.run({"x": np.zeros((9, 8, 16, 16), np.float32)})
    # Both depthwise schedules were measured, per profile.
    text = open(cache).read()
    assert text.count("\tdepthwise\t") == 2 and text.count("\tim2col\t") == 2, text


def test_trt_style_provider_options(tmp_path):
    import warnings

    import kiln as k

    settings = k._build_settings({"trt_profile_min_shapes": "x:1x8x16x16,x:3x8x16x16",
                                  "trt_profile_opt_shapes": "x:1x8x16x16,x:4x8x16x16",
                                  "trt_profile_max_shapes": "x:2x8x16x16,x:8x8x16x16",
                                  "trt_timing_cache_path": str(tmp_path), "tune": "1"})
    assert settings["profiles"] == [{"x": ([1, 8, 16, 16], [1, 8, 16, 16], [2, 8, 16, 16])},
                                    {"x": ([3, 8, 16, 16], [4, 8, 16, 16], [8, 8, 16, 16])}]
    assert settings["tune"] is True and settings["timing_cache"] == str(tmp_path / "kiln_timing_cache.txt")
    with pytest.raises(ValueError, match="need trt_profile_min_shapes"):
        k._build_settings({"trt_profile_min_shapes": "x:1x8x16x16"})
    with pytest.raises(ValueError, match="integers"):
        k._build_settings({"trt_profile_min_shapes": "x:1xA", "trt_profile_opt_shapes": "x:1", "trt_profile_max_shapes": "x:1"})
    path = depthwise_model(tmp_path / "dw.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no GPU here: the session says it runs on the CPU
        sess = k.InferenceSession(path, providers=[("CUDAExecutionProvider", {
            "trt_profile_min_shapes": "x:1x8x16x16", "trt_profile_opt_shapes": "x:2x8x16x16",
            "trt_profile_max_shapes": "x:4x8x16x16"})])
    assert sess.engine.profiles == [{"x": ([1, 8, 16, 16], [2, 8, 16, 16], [4, 8, 16, 16])}]
    with pytest.raises(Exception, match="outside every shape profile"):
        sess.run(None, {"x": np.zeros((5, 8, 16, 16), np.float32)})


def test_tuning_survives_inputs_the_model_refuses(tmp_path):
    """The tuning run feeds zeros to integer inputs; a model that refuses them (Range with delta 0)
    still builds: tuning stops with a warning and the layers keep their kernels' own choices."""
    import kiln as k

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    zero = numpy_helper.from_array(np.array(0, np.int64), "zero")
    five = numpy_helper.from_array(np.array(5, np.int64), "five")
    nodes = [helper.make_node("Range", ["zero", "five", "d"], ["r"]),
             helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8]),
                                       helper.make_tensor_value_info("d", TensorProto.INT64, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("r", TensorProto.INT64, None)], [w, zero, five])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = tmp_path / "range.onnx"
    path.write_bytes(m.SerializeToString())
    e = k.Engine.build(str(path), tune=True)
    y, r = e.create_context().run({"x": np.ones((2, 3, 8, 8), np.float32), "d": np.array(1, np.int64)})
    assert r.tolist() == [0, 1, 2, 3, 4] and y.shape == (2, 4, 8, 8)


def test_convolutions_that_add_their_residual_in_place_are_tuned(tmp_path):
    """A fused convolution that adds its residual in the residual's own memory (oneDNN's sum post-op,
    the planner's in-place chain) is tuned like any layer: every tactic starts from the residual as it
    was (not from what the last run wrote over it), one that does not work in place (kiln's packed
    kernel) gets an output of its own, none is rejected or fails, and the tuned engine computes the
    untuned one's result."""
    import kiln as k

    rng = np.random.default_rng(2)
    c = 32
    inits = [numpy_helper.from_array((rng.standard_normal((c, c, 1, 1)) / np.sqrt(c)).astype(np.float32), f"w{i}")
             for i in range(3)]
    n = helper.make_node
    nodes = [n("Conv", ["x", "w0"], ["h"]), n("Relu", ["h"], ["hr"]), n("Conv", ["hr", "w1"], ["a"]), n("Relu", ["a"], ["ar"]),
             n("Conv", ["ar", "w2"], ["b"]), n("Add", ["b", "hr"], ["s"]), n("Relu", ["s"], ["y"])]
    g = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 12, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    path = tmp_path / "residual.onnx"
    path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString())
    code, out, err = kiln("build", str(path), "-o", str(tmp_path / "m.kiln"), "--tune", "-v")
    assert code == 0, out + err
    lines = [line for line in err.splitlines() if "tune node" in line and "float32[1,12,10,32]]" in line]
    assert len(lines) == 1, err  # the one convolution with a residual input (4 inputs)
    assert "rejected" not in lines[0] and "failed" not in lines[0] and "onednn-direct" in lines[0], lines[0]
    x = rng.standard_normal((1, c, 12, 10)).astype(np.float32)
    tuned = k.InferenceSession(str(tmp_path / "m.kiln")).run(None, {"x": x})[0]
    plain = k.InferenceSession(str(path)).run(None, {"x": x})[0]
    np.testing.assert_allclose(tuned, plain, rtol=1e-5, atol=1e-5)


def tuning_summary(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("kiln: tuning: ")]
    assert len(lines) == 1, err
    return lines[0]


def test_timing_cache_folder_holds_one_file_per_device(tmp_path):
    """--timing-cache FOLDER: the cache file inside is named by the device (one folder serves every
    GPU and CPU of a user); the second build takes every layer from it."""
    folder = tmp_path / "timing"
    folder.mkdir()
    args = ["build", EXAMPLE, "--opt-level", "1", "--tune", "--timing-cache", str(folder), "--shapes", "image:4x3x32x32", "-v"]
    code, out, err = kiln(*args, "-o", str(tmp_path / "a.kiln"))
    assert code == 0, out + err
    files = list(folder.iterdir())
    assert len(files) == 1 and files[0].suffix == ".cache", files
    assert ", 0 from the timing cache" in tuning_summary(err), err
    code, out, err = kiln(*args, "-o", str(tmp_path / "b.kiln"))
    assert code == 0, out + err
    assert "0 layers timed" in tuning_summary(err) and ", 4 from the timing cache" in tuning_summary(err), err
    assert list(folder.iterdir()) == files
    code, out, err = kiln("cache", "info", str(files[0]))
    assert code == 0 and "layers: 4" in out, out + err


def test_tuning_budget_leaves_later_layers_to_their_kernels(tmp_path):
    """--tune-budget: once the build's tuning time is spent, the remaining layers keep their kernels'
    own choices (counted in the summary) and the engine still builds and runs; 0 means no limit."""
    x = np.random.default_rng(1).standard_normal((4, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    outs = {}
    for budget, want_left in (("0.000001", True), ("0", False)):
        engine = tmp_path / f"m{budget}.kiln"
        code, out, err = kiln("build", EXAMPLE, "-o", str(engine), "--opt-level", "1", "--tune", "--tune-budget", budget,
                              "--shapes", "image:4x3x32x32", "-v")
        assert code == 0, out + err
        summary = tuning_summary(err)
        left = int(summary.split("timing cache, ")[1].split(" left to their kernels")[0])
        assert (left == 4) if want_left else (left == 0), summary
        if want_left:
            assert "skipped (tuning budget spent)" in err, err
        code, out, err = kiln("run", str(engine), "-i", f"image={tmp_path / 'x.npy'}", "--output-dir", str(tmp_path / budget))
        assert code == 0, out + err
        outs[budget] = [np.load(p) for p in sorted((tmp_path / budget).glob("*.npy"))]
    for a, b in zip(outs["0.000001"], outs["0"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_untuned_build_stores_each_kernels_own_tactic(tmp_path):
    """--no-tune: the build decides each kernel's own tactic and the engine file stores it, so `kiln inspect`
    shows one per layer that offers several (marked untuned, no time), and a budget-skipped layer of a tuned
    build shows its kernel's own choice the same way."""
    engine = tmp_path / "m.kiln"
    code, out, err = kiln("build", EXAMPLE, "-o", str(engine), "--opt-level", "1", "--no-tune", "--shapes", "image:4x3x32x32")
    assert code == 0, out + err
    code, out, err = kiln("inspect", str(engine))
    assert code == 0, out + err
    lines = [line for line in out.splitlines() if "{tactic " in line]
    assert len(lines) == 4, out  # three convolutions and the Gemm
    assert all("(untuned)" in line and " ms" not in line for line in lines), out
    skipped = tmp_path / "skipped.kiln"
    code, out, err = kiln("build", EXAMPLE, "-o", str(skipped), "--opt-level", "1", "--tune", "--tune-budget", "0.000001",
                          "--shapes", "image:4x3x32x32")
    assert code == 0, out + err
    code, tuned_out, err = kiln("inspect", str(skipped))
    assert code == 0, tuned_out + err
    assert [line for line in tuned_out.splitlines() if "{tactic " in line] == lines, tuned_out


def test_run_side_commands_take_no_cache(tmp_path):
    """run/bench/profile/compare accept --no-cache; a CPU .onnx is not tuned, so no cache folder is
    made under the user's cache home."""
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    for cmd in (["run", EXAMPLE], ["run", EXAMPLE, "--no-cache"], ["bench", EXAMPLE, "-n", "2", "--no-cache"]):
        r = subprocess.run([KILN, *cmd], capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "timing cache" not in r.stderr, r.stderr
    assert not (tmp_path / "xdg").exists()
