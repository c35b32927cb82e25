"""The Python API: InferenceSession (onnxruntime-compatible), the engine API, and kiln.backend."""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln
import kiln.backend

RNG = np.random.default_rng(0)


def mlp_model(batch="N") -> onnx.ModelProto:
    """y = Relu(x + b) @ W, with x: [batch, 4], b: [4], W: [4, 3] (an initializer)."""
    w = RNG.standard_normal((4, 3)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "b"], ["s"]),
            helper.make_node("Relu", ["s"], ["r"]),
            helper.make_node("MatMul", ["r", "W"], ["y"]),
        ],
        "mlp",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])],
        initializer=[numpy_helper.from_array(w, "W")],
    )
    # IR 8 so that onnxruntime 1.22 can load it too (for the side-by-side test)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def mlp_reference(model: onnx.ModelProto, x: np.ndarray, b: np.ndarray) -> np.ndarray:
    w = numpy_helper.to_array(model.graph.initializer[0])
    return np.maximum(x + b, 0) @ w


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return mlp_model()


@pytest.fixture(scope="module")
def session(model) -> kiln.InferenceSession:
    return kiln.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


# ---- InferenceSession


def test_run_matches_numpy(model, session):
    x = RNG.standard_normal((5, 4)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    outputs = session.run(None, {"x": x, "b": b})
    assert isinstance(outputs, list) and len(outputs) == 1
    (y,) = outputs
    assert y.dtype == np.float32 and y.shape == (5, 3)
    np.testing.assert_allclose(y, mlp_reference(model, x, b), rtol=1e-5, atol=1e-5)


def test_run_named_outputs_and_dynamic_batch(model, session):
    for n in (1, 7, 0):
        x = RNG.standard_normal((n, 4)).astype(np.float32)
        b = RNG.standard_normal(4).astype(np.float32)
        (y,) = session.run(["y"], {"x": x, "b": b})
        assert y.shape == (n, 3)
        np.testing.assert_allclose(y, mlp_reference(model, x, b), rtol=1e-5, atol=1e-5)


def test_outputs_are_independent_between_runs(session):
    b = np.zeros(4, np.float32)
    (y1,) = session.run(None, {"x": np.ones((2, 4), np.float32), "b": b})
    first = y1.copy()
    session.run(None, {"x": np.full((2, 4), 3, np.float32), "b": b})
    np.testing.assert_array_equal(y1, first)


def test_non_contiguous_input(model, session):
    big = RNG.standard_normal((6, 8)).astype(np.float32)
    x = big[::2, ::2]  # a strided view
    b = RNG.standard_normal(4).astype(np.float32)
    (y,) = session.run(None, {"x": x, "b": b})
    np.testing.assert_allclose(y, mlp_reference(model, np.ascontiguousarray(x), b), rtol=1e-5, atol=1e-5)


def test_metadata(session):
    inputs = session.get_inputs()
    assert [i.name for i in inputs] == ["x", "b"]
    assert inputs[0].type == "tensor(float)"
    assert inputs[0].shape == ["N", 4]
    assert inputs[1].shape == [4]
    outputs = session.get_outputs()
    assert [o.name for o in outputs] == ["y"]
    assert outputs[0].type == "tensor(float)"
    assert outputs[0].shape == ["N", 3]
    assert session.get_providers() == ["CPUExecutionProvider"]
    assert "NodeArg(name='x'" in repr(inputs[0])


def test_unnamed_dynamic_dim_is_none():
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [None, 2])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [None, 2])],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = kiln.InferenceSession(m.SerializeToString())
    assert sess.get_inputs()[0].shape == [None, 2]
    assert sess.get_inputs()[0].type == "tensor(int64)"


def test_path_input(model, tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(model, str(path))
    sess = kiln.InferenceSession(str(path))
    x = np.ones((2, 4), np.float32)
    b = np.ones(4, np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x, "b": b})[0], mlp_reference(model, x, b), rtol=1e-5)


def test_providers():
    assert "CPUExecutionProvider" in kiln.get_available_providers()
    m = mlp_model().SerializeToString()
    # As onnxruntime: an unknown provider is skipped with a warning, and the CPU runs the model.
    with pytest.warns(UserWarning, match="NoSuchExecutionProvider"):
        sess = kiln.InferenceSession(m, providers=["NoSuchExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    sess = kiln.InferenceSession(m, providers=[("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"])
    expected = "CUDAExecutionProvider" if kiln.cuda_available() else "CPUExecutionProvider"
    assert sess.get_providers()[0] == expected
    # Another GPU is refused with what to do instead, never run silently on GPU 0 (issue #42).
    with pytest.raises(ValueError, match="device_id 1.*CUDA_VISIBLE_DEVICES=1"):
        kiln.InferenceSession(m, providers=[("CUDAExecutionProvider", {"device_id": 1}), "CPUExecutionProvider"])


def test_cuda_provider_options():
    # kiln's reading of CUDAExecutionProvider options: precision (or TensorRT's flags), CUDA graphs.
    assert kiln._cuda_settings({}) == ("fp32", None)
    assert kiln._cuda_settings({"precision": "FP16"}) == ("fp16", None)
    assert kiln._cuda_settings({"trt_fp16_enable": "True", "enable_cuda_graph": "0"}) == ("fp16", False)
    assert kiln._cuda_settings({"trt_bf16_enable": True, "enable_cuda_graph": 1}) == ("bf16", True)
    with pytest.raises(ValueError, match="precision"):
        kiln._cuda_settings({"precision": "int4"})
    providers = [("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"]
    assert kiln._cuda_provider_options(providers, [{"precision": "fp16"}, {}]) == {"device_id": 0, "precision": "fp16"}
    proto = mlp_model()
    m = proto.SerializeToString()
    sess = kiln.InferenceSession(m, providers=[("CUDAExecutionProvider", {"precision": "fp16"})])
    x = np.ones((2, 4), np.float32)
    b = np.zeros(4, np.float32)
    want = mlp_reference(proto, x, b)
    if not kiln.cuda_available():  # the CPU takes over, in float32 (as onnxruntime ignores absent providers)
        assert sess.get_providers() == ["CPUExecutionProvider"]
        assert sess.engine.metadata()["precision"] == "fp32"
    got = sess.run(None, {"x": x, "b": b})[0]
    np.testing.assert_allclose(got, want, rtol=5e-2 if kiln.cuda_available() else 1e-5, atol=1e-2 if kiln.cuda_available() else 0)
    # Reduced precision is for GPU engines: a CPU build refuses it, naming the reason.
    for p in ("fp16", "bf16", "tf32", "best"):
        with pytest.raises(kiln.KilnError, match="(?i)gpu engines"):
            kiln.Engine.build_from_bytes(m, device="cpu", precision=p)
    with pytest.raises(ValueError, match="precision"):
        kiln.Engine.build_from_bytes(m, device="cpu", precision="fp12")


def test_session_options():
    opts = kiln.SessionOptions()
    opts.graph_optimization_level = kiln.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    m = mlp_model()
    sess = kiln.InferenceSession(m.SerializeToString(), sess_options=opts)
    x = np.ones((3, 4), np.float32)
    b = np.zeros(4, np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x, "b": b})[0], mlp_reference(m, x, b), rtol=1e-5)


def test_version():
    assert isinstance(kiln.__version__, str) and kiln.__version__
    assert issubclass(kiln.KilnError, RuntimeError)


# ---- Errors


def test_wrong_input_name(session):
    with pytest.raises(kiln.KilnError, match="'z'"):
        session.run(None, {"z": np.ones((1, 4), np.float32), "b": np.ones(4, np.float32)})


def test_missing_input(session):
    with pytest.raises(kiln.KilnError, match="'b'"):
        session.run(None, {"x": np.ones((1, 4), np.float32)})


def test_wrong_dtype(session):
    with pytest.raises(kiln.KilnError) as e:
        session.run(None, {"x": np.ones((1, 4), np.float64), "b": np.ones(4, np.float32)})
    assert "'x'" in str(e.value)
    assert e.value.code == "InvalidArgument"


def test_wrong_shape(session):
    with pytest.raises(kiln.KilnError, match="'x'"):
        session.run(None, {"x": np.ones((1, 5), np.float32), "b": np.ones(4, np.float32)})
    with pytest.raises(kiln.KilnError, match="'x'"):
        session.run(None, {"x": np.ones((4,), np.float32), "b": np.ones(4, np.float32)})


def test_wrong_output_name(session):
    with pytest.raises(kiln.KilnError, match="'nope'"):
        session.run(["nope"], {"x": np.ones((1, 4), np.float32), "b": np.ones(4, np.float32)})


def test_invalid_model_bytes():
    with pytest.raises(kiln.KilnError):
        kiln.InferenceSession(b"this is not an onnx model")


def test_missing_file(tmp_path):
    with pytest.raises(kiln.KilnError):
        kiln.InferenceSession(str(tmp_path / "missing.onnx"))


# ---- Engine files


def test_engine_save_load_roundtrip(model, tmp_path):
    engine = kiln.Engine.build_from_bytes(model.SerializeToString(), device="cpu")
    path = tmp_path / "mlp.kiln"
    engine.save(str(path))
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    want = mlp_reference(model, x, b)

    loaded = kiln.Engine.load(str(path))
    assert [i.name for i in loaded.inputs] == ["x", "b"]
    assert [o.name for o in loaded.outputs] == ["y"]
    np.testing.assert_allclose(loaded.create_context().run({"x": x, "b": b})[0], want, rtol=1e-5, atol=1e-5)
    # A CPU engine's context has no CUDA stream to take (tests/unit/test_runtime.cpp covers CUDA's).
    with pytest.raises(kiln.KilnError, match="(?i)stream"):
        loaded.create_context().set_cuda_stream(1)

    # the same through InferenceSession, from the path and from the bytes
    for src in (str(path), engine.serialize()):
        sess = kiln.InferenceSession(src)
        np.testing.assert_allclose(sess.run(None, {"x": x, "b": b})[0], want, rtol=1e-5, atol=1e-5)

    data = engine.serialize()
    assert isinstance(data, bytes) and data[4:8] == b"KILN"
    assert path.read_bytes() == data
    meta = loaded.metadata()
    assert isinstance(meta, dict) and meta
    assert isinstance(loaded.placement_report(), str)


@pytest.mark.parametrize("how", ["truncated", "flipped", "garbage", "empty"])
def test_corrupt_engine_bytes(model, how):
    data = bytearray(kiln.Engine.build_from_bytes(model.SerializeToString()).serialize())
    if how == "truncated":
        data = data[: len(data) // 2]
    elif how == "flipped":
        for i in range(8, len(data), 7):
            data[i] ^= 0x5A
    elif how == "garbage":
        data = bytearray(b"xxxxKILN" + bytes(RNG.integers(0, 256, 200, dtype=np.uint8)))
    else:
        data = bytearray()
    try:
        engine = kiln.Engine.load_from_bytes(bytes(data))
    except kiln.KilnError:
        return  # refused: what we want
    # A flip the verifier cannot see (weights) may load; it must still not crash.
    try:
        engine.create_context().run({"x": np.ones((1, 4), np.float32), "b": np.ones(4, np.float32)})
    except kiln.KilnError:
        pass


# ---- dtypes


def identity_session(elem_type, shape=(2, 3)):
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "id",
        [helper.make_tensor_value_info("x", elem_type, list(shape))],
        [helper.make_tensor_value_info("y", elem_type, list(shape))],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return kiln.InferenceSession(m.SerializeToString())


@pytest.mark.parametrize(
    "np_dtype",
    [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
     np.uint32, np.uint64, np.bool_, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
     ml_dtypes.int4, ml_dtypes.uint4],
)
def test_dtype_roundtrip(np_dtype):
    elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(np_dtype))
    if np.dtype(np_dtype) == np.bool_:
        x = RNG.integers(0, 2, (2, 3)).astype(np.bool_)
    elif np.dtype(np_dtype) == np.dtype(ml_dtypes.int4):
        x = np.array([[-8, -1, 0], [1, 5, 7]]).astype(np_dtype)
    elif np.dtype(np_dtype) == np.dtype(ml_dtypes.uint4):
        x = np.array([[0, 1, 7], [8, 14, 15]]).astype(np_dtype)
    else:
        x = (RNG.standard_normal((2, 3)) * 4).astype(np_dtype)
    (y,) = identity_session(elem_type).run(None, {"x": x})
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y.astype(np.float64), x.astype(np.float64))


def test_string_roundtrip():
    x = np.array([["a", "bé"], ["", "ünïcödé"], ["x" * 100, "z"]], dtype=object)
    (y,) = identity_session(TensorProto.STRING, (3, 2)).run(None, {"x": x})
    assert y.dtype == object
    np.testing.assert_array_equal(y, x)
    # numpy 'U' arrays are accepted too
    (y2,) = identity_session(TensorProto.STRING, (3, 2)).run(None, {"x": x.astype(str)})
    np.testing.assert_array_equal(y2, x)


# ---- Threads


def test_concurrent_runs(model, session):
    b = RNG.standard_normal(4).astype(np.float32)
    xs = [RNG.standard_normal((8, 4)).astype(np.float32) for _ in range(8)]
    results = [None] * len(xs)

    def work(i):
        for _ in range(20):
            results[i] = session.run(None, {"x": xs[i], "b": b})[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, y in zip(xs, results):
        np.testing.assert_allclose(y, mlp_reference(model, x, b), rtol=1e-5, atol=1e-5)


# ---- kiln.backend (onnx's backend protocol)


def test_backend_run_node():
    node = helper.make_node("Add", ["a", "b"], ["c"])
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    b = RNG.standard_normal((3,)).astype(np.float32)
    outputs = kiln.backend.run_node(node, [a, b])
    np.testing.assert_allclose(outputs[0], a + b, rtol=1e-6)
    np.testing.assert_allclose(outputs["c"], a + b, rtol=1e-6)


def test_backend_run_node_int_and_attributes():
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])
    x = np.arange(6, dtype=np.int64).reshape(2, 3)
    (y,) = kiln.backend.run_node(node, [x])
    np.testing.assert_array_equal(y, x.T)


def test_backend_prepare_skips_initializer_inputs(model):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    # IR < 4 style: the initializer W is also listed as a graph input
    m.graph.input.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, [4, 3]))
    rep = kiln.backend.prepare(m, "CPU")
    x = np.ones((2, 4), np.float32)
    b = np.ones(4, np.float32)
    (y,) = rep.run([x, b])
    np.testing.assert_allclose(y, mlp_reference(model, x, b), rtol=1e-5)
    np.testing.assert_allclose(kiln.backend.run_model(model, [x, b])[0], mlp_reference(model, x, b), rtol=1e-5)


def test_backend_devices():
    assert kiln.backend.supports_device("CPU")
    assert kiln.backend.supports_device("CUDA") == kiln.cuda_available()


def test_same_metadata_and_outputs_as_onnxruntime(model):
    ort = pytest.importorskip("onnxruntime")
    data = model.SerializeToString()
    ours = kiln.InferenceSession(data, providers=["CPUExecutionProvider"])
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for a, b in zip(ours.get_inputs() + ours.get_outputs(), theirs.get_inputs() + theirs.get_outputs()):
        assert (a.name, a.shape, a.type) == (b.name, b.shape, b.type)
    feed = {"x": RNG.standard_normal((3, 4)).astype(np.float32), "b": RNG.standard_normal(4).astype(np.float32)}
    np.testing.assert_allclose(ours.run(None, feed)[0], theirs.run(None, feed)[0], rtol=1e-5, atol=1e-6)
