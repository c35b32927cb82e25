"""Plugins (#43): kiln's plugin ABI through the Python API and the `kiln` command.

The example plugin (examples/plugins/leaky_hard_tanh.c) and the misbehaving test plugins
(tests/plugins/test_plugins.c) are compiled here from their sources with the C compiler, against the
repository's include/kiln/plugin.h only. Plugins stay loaded for the life of a process, so every case
that needs a process without them (or with an override) runs in a fresh Python process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
from onnx import TensorProto, helper

import kiln

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILN = os.path.join(REPO, "build", "kiln")
CC = shutil.which("cc") or shutil.which("gcc")

pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler to build the plugins")


@pytest.fixture(scope="session")
def plugins(tmp_path_factory):
    """The plugin libraries by variant: example, wrong_abi, bad_shape, override, ort_like."""
    out = tmp_path_factory.mktemp("plugins")
    libs = {}

    def cc(name, source, *defines):
        lib = str(out / f"lib{name}.so")
        cmd = [CC, "-shared", "-fPIC", "-O2", "-fvisibility=hidden", "-I", os.path.join(REPO, "include"), *defines, source, "-o", lib]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        return lib

    libs["example"] = cc("kiln_example_plugin", os.path.join(REPO, "examples", "plugins", "leaky_hard_tanh.c"))
    test_source = os.path.join(REPO, "tests", "plugins", "test_plugins.c")
    for variant in ("wrong_abi", "bad_shape", "override", "ort_like"):
        libs[variant] = cc(f"kiln_test_{variant}", test_source, f"-DKILN_TEST_VARIANT={variant.upper()}")
    return libs


def chain_model(ops, path=None):
    """x (float [batch, 8]) → the ops in a chain → y. ops: (domain, op_type, attrs)."""
    nodes, prev = [], "x"
    for i, (domain, op, attrs) in enumerate(ops):
        out = "y" if i == len(ops) - 1 else f"t{i}"
        nodes.append(helper.make_node(op, [prev], [out], name=f"n{i}", domain=domain, **attrs))
        prev = out
    domains = sorted({d for d, _, _ in ops if d})
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
    )
    opsets = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    if path:
        onnx.save(model, str(path))
    return model.SerializeToString()


LEAKY = [
    ("kiln_example", "LeakyHardTanh", {"min_val": -1.0, "max_val": 1.0, "slope": 0.1}),
    ("kiln_example", "LeakyHardTanh", {"min_val": -0.5, "max_val": 2.0, "slope": 0.25}),
]


def leaky_ref(x, lo, hi, slope):
    return np.where(x > hi, hi + slope * (x - hi), np.where(x < lo, lo + slope * (x - lo), x)).astype(np.float32)


def reference(x):
    return leaky_ref(leaky_ref(x, -1.0, 1.0, 0.1), -0.5, 2.0, 0.25)


def fresh_python(code: str, tmp_path) -> subprocess.CompletedProcess:
    """Runs `code` in a new Python process (no plugin loaded yet)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_unknown_op_fails_listing_it_with_the_hint(tmp_path):
    model = tmp_path / "m.onnx"
    chain_model(LEAKY + [("kiln_other", "Missing", {})], model)
    r = fresh_python(f"""
        import kiln
        try:
            kiln.InferenceSession({str(model)!r})
        except kiln.KilnError as e:
            print(e)
        """, tmp_path)
    assert "kiln_example.LeakyHardTanh" in r.stdout and "kiln_other.Missing" in r.stdout, r.stdout + r.stderr
    assert "register_custom_ops_library" in r.stdout and "--plugin" in r.stdout, r.stdout


def test_build_run_save_and_reload_in_a_fresh_process(plugins, tmp_path):
    so = kiln.SessionOptions()
    so.register_custom_ops_library(plugins["example"])
    sess = kiln.InferenceSession(chain_model(LEAKY), so)
    rng = np.random.default_rng(0)
    for batch in (1, 5, 33):
        x = rng.uniform(-3, 3, size=(batch, 8)).astype(np.float32)
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_allclose(y, reference(x), rtol=1e-6, atol=1e-6)
    engine = tmp_path / "m.kiln"
    sess.engine.save(str(engine))
    assert sess.engine.metadata()["format_version"] == "4"
    x = rng.uniform(-3, 3, size=(4, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "want.npy", reference(x))
    r = fresh_python(f"""
        import numpy as np, kiln
        so = kiln.SessionOptions()
        so.register_custom_ops_library({plugins["example"]!r})
        sess = kiln.InferenceSession({str(engine)!r}, so)
        (y,) = sess.run(None, {{"x": np.load("x.npy")}})
        np.testing.assert_allclose(y, np.load("want.npy"), rtol=1e-6, atol=1e-6)
        print("MATCH")
        """, tmp_path)
    assert "MATCH" in r.stdout, r.stdout + r.stderr


def test_engine_without_its_plugin_names_op_and_library(plugins, tmp_path):
    kiln.load_plugin(plugins["example"])
    engine = tmp_path / "m.kiln"
    kiln.InferenceSession(chain_model(LEAKY)).engine.save(str(engine))
    r = fresh_python(f"""
        import kiln
        try:
            kiln.InferenceSession({str(engine)!r})
        except kiln.KilnError as e:
            print(type(e).__name__, e)
        """, tmp_path)
    out = r.stdout
    assert "EngineError" in out, out + r.stderr
    assert "kiln_example.LeakyHardTanh" in out and "libkiln_example_plugin.so" in out and "not loaded" in out, out


def test_engine_refuses_another_build_of_its_plugin(plugins, tmp_path):
    """Same file name, plugin version and declarations, other contents (another build, other kernels):
    the engine names the difference instead of running with kernels it was not built with."""
    kiln.load_plugin(plugins["example"])
    engine = tmp_path / "m.kiln"
    kiln.InferenceSession(chain_model(LEAKY)).engine.save(str(engine))
    other = tmp_path / "other"
    other.mkdir()
    rebuilt = other / os.path.basename(plugins["example"])
    rebuilt.write_bytes(open(plugins["example"], "rb").read() + b"another build")
    r = fresh_python(f"""
        import kiln
        kiln.load_plugin({str(rebuilt)!r})
        try:
            kiln.InferenceSession({str(engine)!r})
        except kiln.KilnError as e:
            print(type(e).__name__, e)
        """, tmp_path)
    assert "EngineError" in r.stdout and "another build of it" in r.stdout, r.stdout + r.stderr


def test_abi_mismatch_is_refused(plugins):
    with pytest.raises(kiln.EngineError, match=r"ABI version 999.*expects version 1"):
        kiln.load_plugin(plugins["wrong_abi"])


def test_onnxruntime_custom_op_library_without_ops_is_refused_clearly(plugins):
    # Loaded through kiln's shim of ORT's API (tests/python/test_ort_custom_ops.py), it adds no op.
    so = kiln.SessionOptions()
    with pytest.raises(kiln.KilnError, match="ONNX Runtime custom-op library.*registered no CPU op"):
        so.register_custom_ops_library(plugins["ort_like"])


def test_shape_function_error_names_the_plugin(plugins):
    kiln.load_plugin(plugins["bad_shape"])
    with pytest.raises(kiln.KilnError, match=r"kiln_test_bad_shape.*BadShape refuses every shape"):
        kiln.InferenceSession(chain_model([("kiln_test", "BadShape", {})]))


def test_override_only_when_asked(plugins, tmp_path):
    # x @ I → Relu: kiln's fusions would fold the Relu into the product's epilogue; a graph that uses an
    # overridden op is built without them, so the plugin's Relu runs.
    model = tmp_path / "relu.onnx"
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [onnx.numpy_helper.from_array(np.eye(8, dtype=np.float32), "w")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(model))
    # The QDQ form of the same: fuse-qdq (a level-1 pass) would make the product a kiln.QMatMul and then
    # requantize it with the DequantizeLinear → Relu → QuantizeLinear after it. Every value is a
    # multiple of the scale 0.5, so both Relus give exact results.
    qdq = tmp_path / "qdq_relu.onnx"
    half, zero = (onnx.numpy_helper.from_array(np.array(v, dtype=t), n) for v, t, n in ((0.5, np.float32, "s"), (0, np.int8, "z")))
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]), helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "one", "z"], ["wd"]), helper.make_node("MatMul", ["xd", "wd"], ["m"]),
             helper.make_node("QuantizeLinear", ["m", "s", "z"], ["mq"]), helper.make_node("DequantizeLinear", ["mq", "s", "z"], ["md"]),
             helper.make_node("Relu", ["md"], ["r"]), helper.make_node("QuantizeLinear", ["r", "s", "z"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "s", "z"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                              [half, zero, onnx.numpy_helper.from_array(np.eye(8, dtype=np.int8), "wq"),
                               onnx.numpy_helper.from_array(np.array(1, dtype=np.float32), "one")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(qdq))
    r = fresh_python(f"""
        import numpy as np, kiln
        try:
            kiln.load_plugin({plugins["override"]!r})
        except kiln.KilnError as e:
            print("REFUSED", e)
        x = np.array([[-1, 2, -3, 4, 0.5, -0.5, 1, -2]], dtype=np.float32)
        for m in ({str(model)!r}, {str(qdq)!r}):
            (y,) = kiln.InferenceSession(m).run(None, {{"x": x}})
            print("BUILTIN", np.array_equal(y, np.maximum(x, 0)))
        kiln.load_plugin({plugins["override"]!r}, override=True)
        for m in ({str(model)!r}, {str(qdq)!r}):
            (y,) = kiln.InferenceSession(m).run(None, {{"x": x}})
            print("PLUGIN", np.array_equal(y, np.where(x > 0, 2 * x, 0)), y.tolist())
        """, tmp_path)
    out = r.stdout
    assert "REFUSED" in out and "built into kiln" in out, out + r.stderr
    assert out.count("BUILTIN True") == 2 and out.count("PLUGIN True") == 2, out + r.stderr


@pytest.mark.skipif(not os.path.exists(KILN), reason="the kiln command is not built")
def test_cli_plugin_option(plugins, tmp_path):
    model = tmp_path / "m.onnx"
    chain_model(LEAKY, model)
    engine = tmp_path / "m.kiln"
    env = dict(os.environ, KILN_PLUGIN_PATH=os.path.dirname(plugins["example"]))

    def kiln_cmd(*args):
        r = subprocess.run([KILN, *args], capture_output=True, text=True, timeout=120, env=env)
        return r.returncode, r.stdout + r.stderr

    code, text = kiln_cmd("build", str(model), "-o", str(engine), "-q")
    assert code != 0 and "--plugin" in text and "kiln_example.LeakyHardTanh" in text, text
    # A bare name is found in KILN_PLUGIN_PATH.
    code, text = kiln_cmd("build", str(model), "-o", str(engine), "-q", "--plugin", "kiln_example_plugin")
    assert code == 0, text
    code, text = kiln_cmd("run", str(engine))
    assert code != 0 and "libkiln_example_plugin.so" in text and "not loaded" in text, text
    for cmd in ("run", "bench", "profile"):
        extra = ["-n", "2", "--warmup", "0"] if cmd == "bench" else ["--runs", "2", "--warmup", "0", "-o", str(tmp_path / "p")] if cmd == "profile" else []
        code, text = kiln_cmd(cmd, str(engine), "--plugin", plugins["example"], *extra)
        assert code == 0, cmd + ": " + text
    code, text = kiln_cmd("info", str(model), "--plugin", plugins["example"])
    assert code == 0 and "unsupported: none" in text, text
    code, text = kiln_cmd("compare", str(model), str(engine), "--plugin", plugins["example"])
    assert code == 0 and " OK" in text, text
