"""ONNX Runtime API parity: overridable initializers, exception classes, model metadata, session
options that do something (or warn), per-session threads, profiling, OrtValue-like tensors with
DLPack, IOBinding — each checked against what onnxruntime itself does where it runs here."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import subprocess
import threading

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILN = os.path.join(REPO, "build", "kiln")


def weights_as_inputs_model(ir_version=3):
    """A Conv1d whose weights are listed as graph inputs (as models before IR 4 do): an input with a
    default, which ONNX Runtime calls an overridable initializer."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 2, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "W", "B"], ["y"], pads=[1, 1])],
        "conv1d",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8]),
            helper.make_tensor_value_info("W", TensorProto.FLOAT, [4, 2, 3]),
            helper.make_tensor_value_info("B", TensorProto.FLOAT, [4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)], ir_version=ir_version)
    m.producer_name = "kiln-tests"
    m.producer_version = "1.2"
    m.domain = "ai.kiln.test"
    m.model_version = 7
    m.doc_string = "a one-layer model"
    helper.set_model_props(m, {"author": "kiln", "licence": "none"})
    return m


def conv1d_reference(x, w, b):
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1)))
    y = np.zeros((1, w.shape[0], x.shape[2]), np.float32)
    for o in range(w.shape[0]):
        for t in range(x.shape[2]):
            y[0, o, t] = np.sum(xp[0, :, t:t + 3] * w[o]) + b[o]
    return y


@pytest.fixture
def conv_model(tmp_path):
    m = weights_as_inputs_model()
    path = tmp_path / "conv1d.onnx"
    onnx.save(m, str(path))
    return m, str(path)


# ---- overridable initializers


def test_weights_listed_as_inputs_are_overridable_initializers(conv_model):
    m, path = conv_model
    sess = kiln.InferenceSession(path)
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["x"]
    assert [i.name for i in sess.get_overridable_initializers()] == ["W", "B"]
    x = np.random.default_rng(1).standard_normal((1, 2, 8)).astype(np.float32)
    w = numpy_helper.to_array(m.graph.initializer[0])
    b = numpy_helper.to_array(m.graph.initializer[1])
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_allclose(y, conv1d_reference(x, w, b), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y, ref.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
    # Feeding one overrides it.
    w2 = np.ones_like(w)
    (y2,) = sess.run(None, {"x": x, "W": w2})
    np.testing.assert_allclose(y2, conv1d_reference(x, w2, b), rtol=1e-5, atol=1e-5)


def test_cli_keeps_initializers_of_inputs(conv_model, tmp_path):
    m, path = conv_model
    x = np.random.default_rng(2).standard_normal((1, 2, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    r = subprocess.run([KILN, "run", path, "-i", f"x={tmp_path / 'x.npy'}", "--output-dir", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    w = numpy_helper.to_array(m.graph.initializer[0])
    b = numpy_helper.to_array(m.graph.initializer[1])
    np.testing.assert_allclose(np.load(out / "y.npy"), conv1d_reference(x, w, b), rtol=1e-5, atol=1e-5)
    # Without --input only x is random: the weights are the model's (the same seed gives the same x).
    r = subprocess.run([KILN, "run", path, "--output-dir", str(out / "r")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    y = np.load(out / "r" / "y.npy")
    r2 = subprocess.run([KILN, "compare", path, path, "--device-a", "cpu"], capture_output=True, text=True, timeout=120)
    assert r2.returncode == 0, r2.stdout + r2.stderr
    assert y.shape == (1, 4, 8)


# ---- errors


def test_errors_are_ort_named_subclasses(conv_model, tmp_path):
    _, path = conv_model
    sess = kiln.InferenceSession(path)
    with pytest.raises(kiln.InvalidArgument) as e:
        sess.run(None, {"x": np.zeros((1, 3, 8), np.float32)})
    assert isinstance(e.value, kiln.KilnError) and isinstance(e.value, RuntimeError)
    assert e.value.code == "InvalidArgument"
    with pytest.raises(kiln.InvalidArgument):
        sess.run(None, {"nope": np.zeros((1, 2, 8), np.float32)})
    with pytest.raises(kiln.NoSuchFile):
        kiln.InferenceSession(str(tmp_path / "missing.onnx"))
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not a model")
    with pytest.raises(kiln.KilnError) as e:
        kiln.InferenceSession(str(bad))
    assert type(e.value) is not kiln.KilnError  # a subclass naming the kind of failure
    assert issubclass(kiln.NotImplemented, kiln.KilnError) and issubclass(kiln.EngineError, kiln.KilnError)


# ---- metadata, options, providers


def test_get_modelmeta_matches_onnxruntime(conv_model):
    _, path = conv_model
    mine = kiln.InferenceSession(path).get_modelmeta()
    theirs = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).get_modelmeta()
    for field in ("producer_name", "graph_name", "domain", "description", "version", "custom_metadata_map"):
        assert getattr(mine, field) == getattr(theirs, field), field
    # Kept in engine files.
    engine = kiln.InferenceSession(path).engine.serialize()
    again = kiln.InferenceSession(engine).get_modelmeta()
    assert again.custom_metadata_map == {"author": "kiln", "licence": "none"} and again.version == 7


def test_session_options_refuse_unknown_fields_and_warn_on_unwritten_models(conv_model, tmp_path):
    _, path = conv_model
    so = kiln.SessionOptions()
    with pytest.raises(AttributeError):
        so.no_such_option = 1
    with pytest.raises(AttributeError):
        ort.SessionOptions().no_such_option = 1  # the same in onnxruntime
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    with pytest.warns(UserWarning, match="optimized_model_filepath"):
        kiln.InferenceSession(path, so)
    assert not (tmp_path / "opt.onnx").exists()
    so = kiln.SessionOptions()
    so.add_session_config_entry("session.some_key", "1")
    assert so.get_session_config_entry("session.some_key") == "1"


def test_unavailable_cuda_provider_warns_and_falls_back(conv_model):
    _, path = conv_model
    if kiln.cuda_available():
        pytest.skip("a CUDA GPU is usable here")
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"):
        sess = kiln.InferenceSession(path, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    assert sess.get_provider_options() == {"CPUExecutionProvider": {}}


def test_inputs_as_python_lists(conv_model):
    _, path = conv_model
    sess = kiln.InferenceSession(path)
    x = np.arange(16, dtype=np.float32).reshape(1, 2, 8) / 10
    np.testing.assert_array_equal(sess.run(None, {"x": x.tolist()})[0], sess.run(None, {"x": x})[0])


# ---- threads


def _omp_max_threads():
    lib = ctypes.CDLL(ctypes.util.find_library("gomp"))
    return lib.omp_get_max_threads()


def big_model():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((256, 256)).astype(np.float32)
    nodes, prev = [], "x"
    for k in range(4):
        nodes += [helper.make_node("MatMul", [prev, "W"], [f"m{k}"]), helper.make_node("Tanh", [f"m{k}"], [f"t{k}"])]
        prev = f"t{k}"
    nodes.append(helper.make_node("ReduceSum", [prev], ["y"], keepdims=0))
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 256])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
                          [numpy_helper.from_array(w / 16, "W")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def test_intra_op_threads_do_not_leak_and_results_do_not_depend_on_the_calling_thread():
    before = _omp_max_threads()
    so = kiln.SessionOptions()
    so.intra_op_num_threads = 1
    one = kiln.InferenceSession(big_model(), so)
    x = np.random.default_rng(4).standard_normal((64, 256)).astype(np.float32)
    y_main = one.run(None, {"x": x})[0]
    assert _omp_max_threads() == before  # the session's setting is restored after its run
    results = []
    t = threading.Thread(target=lambda: results.append(one.run(None, {"x": x})[0]))
    t.start()
    t.join()
    assert results[0].tobytes() == y_main.tobytes()  # the same thread count on any calling thread


def test_unbounded_thread_counts_are_refused_or_clamped():
    """30,000 threads made the OpenMP runtime exit the process (issue #50): SessionOptions refuses more
    than 1024, and a context asked for more from C++ runs with 1024 at most, then restores the count."""
    so = kiln.SessionOptions()
    so.intra_op_num_threads = 30000
    with pytest.raises(ValueError, match="intra_op_num_threads 30000: at most 1024"):
        kiln.InferenceSession(big_model(), so)
    before = _omp_max_threads()
    engine = kiln.Engine.build_from_bytes(big_model())
    ctx = engine.create_context()
    ctx.set_num_threads(30000)
    x = np.ones((64, 256), np.float32)
    assert np.isfinite(ctx.run({"x": x})[0]).all()
    assert _omp_max_threads() == before


# ---- profiling


def test_enable_profiling_writes_onnxruntime_events(conv_model, tmp_path):
    _, path = conv_model
    so = kiln.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    sess = kiln.InferenceSession(path, so)
    x = np.zeros((1, 2, 8), np.float32)
    for _ in range(3):
        sess.run(None, {"x": x})
    out = sess.end_profiling()
    assert out.startswith(str(tmp_path / "prof")) and out.endswith(".json")
    with open(out) as f:
        trace = json.load(f)  # ONNX Runtime's format: a list of events (tests/python/test_ort_holes.py)
    nodes = [e for e in trace if e.get("cat") == "Node"]
    runs = [e for e in trace if e.get("name") == "model_run"]
    assert len(runs) == 3
    assert {e["args"]["op_name"] for e in nodes} == {"Conv"}
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in nodes)
    assert nodes[0]["args"]["output_type_shape"] == [{"float": [1, 4, 8]}]
    assert kiln.InferenceSession(path).end_profiling() == ""


# ---- tensors, DLPack, IOBinding


def test_tensor_dlpack_round_trip_is_zero_copy():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = kiln.Tensor.from_dlpack(a)
    assert t.shape() == [3, 4] and t.device_name() == "cpu" and t.data_type() == "tensor(float)" and t.element_type() == 1
    assert t.data_ptr() == a.ctypes.data
    b = np.from_dlpack(t)
    assert b.ctypes.data == a.ctypes.data
    np.testing.assert_array_equal(b, a)
    a[0, 0] = 42  # one memory
    assert t.numpy()[0, 0] == 42 and b[0, 0] == 42
    with pytest.raises(ValueError, match="strided"):
        kiln.Tensor.from_dlpack(np.arange(12, dtype=np.float32).reshape(3, 4).T)
    for dt in (np.float16, np.int8, np.uint8, np.int64, np.bool_, np.float64):
        v = (np.arange(6) % 2).astype(dt).reshape(2, 3)
        np.testing.assert_array_equal(np.from_dlpack(kiln.OrtValue.ortvalue_from_numpy(v)), v)


def test_run_with_ort_values_and_iobinding_on_the_cpu(conv_model):
    _, path = conv_model
    sess = kiln.InferenceSession(path)
    x = np.random.default_rng(5).standard_normal((1, 2, 8)).astype(np.float32)
    (want,) = sess.run(None, {"x": x})
    (got,) = sess.run_with_ort_values(["y"], {"x": kiln.OrtValue.ortvalue_from_numpy(x)})
    np.testing.assert_array_equal(got.numpy(), want)

    binding = sess.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("y")
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], want)

    # An output bound to a caller's buffer is written in place.
    buf = np.zeros((1, 4, 8), np.float32)
    binding.bind_ortvalue_output("y", kiln.Tensor.from_dlpack(buf))
    x2 = x * 2
    binding.bind_ortvalue_input("x", kiln.Tensor.from_numpy(x2))
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(buf, sess.run(None, {"x": x2})[0])
    assert binding.get_outputs()[0].data_ptr() == buf.ctypes.data

    # Raw pointer binding (memory the caller keeps alive).
    binding = sess.io_binding()
    binding.bind_input("x", "cpu", 0, np.float32, x.shape, x.ctypes.data)
    out = np.zeros((1, 4, 8), np.float32)
    binding.bind_output("y", "cpu", 0, np.float32, out.shape, out.ctypes.data)
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(out, want)
    # A bound buffer of the wrong shape is an error, not a silently unwritten buffer.
    binding.bind_ortvalue_output("y", kiln.Tensor.from_numpy(np.zeros((1, 4, 7), np.float32)))
    with pytest.raises(kiln.InvalidArgument, match="bind a buffer of that dtype and shape"):
        sess.run_with_iobinding(binding)
    with pytest.raises(kiln.InvalidArgument):
        binding.bind_cpu_input("nope", x)
    with pytest.raises(kiln.InvalidArgument):
        sess.run_with_iobinding(sess.io_binding())  # x not bound


# ---- the command line


def test_cli_random_inputs_for_every_common_dtype(tmp_path):
    dtypes = {"f16": TensorProto.FLOAT16, "i8": TensorProto.INT8, "u8": TensorProto.UINT8, "b": TensorProto.BOOL,
              "s": TensorProto.STRING, "f64": TensorProto.DOUBLE, "i32": TensorProto.INT32, "u16": TensorProto.UINT16}
    nodes = [helper.make_node("Identity", [n], [n + "_out"]) for n in dtypes]
    g = helper.make_graph(nodes, "ids", [helper.make_tensor_value_info(n, t, [2, 3]) for n, t in dtypes.items()],
                          [helper.make_tensor_value_info(n + "_out", t, [2, 3]) for n, t in dtypes.items()])
    path = tmp_path / "ids.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    r = subprocess.run([KILN, "run", str(path), "--output-dir", str(tmp_path / "o")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    f16 = np.load(tmp_path / "o" / "f16_out.npy")
    assert f16.dtype == np.float16 and np.all(np.abs(f16) <= 1) and np.any(f16 != 0)
    assert set(np.unique(np.load(tmp_path / "o" / "u8_out.npy"))) <= {0, 1}


def test_cli_help_shows_defaults_and_examples():
    r = subprocess.run([KILN, "bench", "--help"], capture_output=True, text=True, timeout=60)
    assert "=50" in r.stdout and "=cpu" in r.stdout  # -n default, --device default
    r = subprocess.run([KILN, "--help"], capture_output=True, text=True, timeout=60)
    assert "Examples:" in r.stdout and "kiln profile" in r.stdout


def test_cli_warns_when_device_is_given_for_an_engine_file(conv_model, tmp_path):
    _, path = conv_model
    engine = tmp_path / "m.kiln"
    assert subprocess.run([KILN, "build", path, "-o", str(engine), "-q"], capture_output=True, timeout=120).returncode == 0
    r = subprocess.run([KILN, "run", str(engine), "--device", "cuda"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "--device is ignored for an engine file" in r.stderr


def test_cli_info_on_an_engine_shows_layers_shapes_kernels_and_memory(conv_model, tmp_path):
    _, path = conv_model
    engine = tmp_path / "m.kiln"
    assert subprocess.run([KILN, "build", path, "-o", str(engine), "-q"], capture_output=True, timeout=120).returncode == 0
    for cmd in ("info", "inspect"):
        r = subprocess.run([KILN, cmd, str(engine)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        out = r.stdout
        assert "x: tensor(float) [1,2,8]" in out and "W: tensor(float) [4,2,3]  (has a default" in out
        assert "(Conv) -> cpu.Conv" in out and "=> float32[1,4,8]" in out  # kernel, output precision and shape
        assert "weights: cpu 112 bytes" in out and "arena: cpu" in out and "precision: fp32" in out
