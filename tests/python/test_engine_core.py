"""The engine core seen from the Python API: memory plans per input-shape signature (shapes computed
while running, shape values, kernels with workspaces, changing batch sizes) against ONNX Runtime,
and op attributes checked against their declarations at import."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import kiln


def _model_bytes(graph) -> bytes:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _same_as_onnxruntime(data: bytes, feeds: list, exact: bool = False) -> kiln.InferenceSession:
    """Runs every feed through kiln and ONNX Runtime, in order, and compares all outputs."""
    sess = kiln.InferenceSession(data, providers=["CPUExecutionProvider"])
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for feed in feeds:
        for g, w in zip(sess.run(None, feed), ref.run(None, feed)):
            assert g.shape == w.shape
            if exact:
                np.testing.assert_array_equal(g, w)
            else:
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    return sess


def _conv_reshape_model() -> bytes:
    """Conv (a workspace kernel) → Reshape to a shape given as an input: the host walk cannot know
    the Reshape's output, so the first run of each batch size learns the sizes (while the Conv's
    workspace, planned ahead, must still be there)."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["y", "target"], ["flat"]),
        helper.make_node("Relu", ["flat"], ["r"]),
        helper.make_node("Conv", ["x", "w"], ["y2"], pads=[1, 1, 1, 1], strides=[2, 2]),
    ]
    graph = helper.make_graph(
        nodes, "learn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 9, 9]),
         helper.make_tensor_value_info("target", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("y2", TensorProto.FLOAT, None)],
        [w, b])
    return _model_bytes(graph)


def test_learning_plans_match_onnxruntime_across_batches():
    rng = np.random.default_rng(0)
    inputs = {b: rng.standard_normal((b, 3, 9, 9)).astype(np.float32) for b in (1, 4)}
    # Each batch size: a learning run, then planned runs; alternating must not mix the plans.
    _same_as_onnxruntime(_conv_reshape_model(),
                         [{"x": inputs[b], "target": np.array([b, -1], np.int64)} for b in (1, 4, 1, 4, 1)])


def _computed_reshape_model() -> bytes:
    """The exporters' pattern: Reshape to [Shape(x)[0], -1] built from Shape/Gather/Unsqueeze/Concat,
    and an Expand whose shape goes through Equal/Where (ViT's class token)."""
    i0 = numpy_helper.from_array(np.array(0, np.int64), "i0")
    ax = numpy_helper.from_array(np.array([0], np.int64), "ax")
    m1 = numpy_helper.from_array(np.array([-1], np.int64), "m1")
    one = numpy_helper.from_array(np.array([1, 1, 4], np.int64), "one")
    tok = numpy_helper.from_array(np.arange(4, dtype=np.float32).reshape(1, 1, 4), "tok")
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
        helper.make_node("Concat", ["n1", "m1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Concat", ["n1", "m1", "m1"], ["want"], axis=0),
        helper.make_node("Equal", ["want", "m1"], ["is_m1"]),
        helper.make_node("Where", ["is_m1", "one", "want"], ["expand_to"]),
        helper.make_node("Expand", ["tok", "expand_to"], ["tokens"]),
    ]
    graph = helper.make_graph(
        nodes, "computed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 5])],
        [helper.make_tensor_value_info("flat", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("tokens", TensorProto.FLOAT, None)],
        [i0, ax, m1, one, tok])
    return _model_bytes(graph)


def test_shape_values_plan_computed_reshapes_on_the_host():
    feeds = [{"x": np.random.default_rng(b).standard_normal((b, 3, 5)).astype(np.float32)} for b in (1, 3, 1)]
    sess = _same_as_onnxruntime(_computed_reshape_model(), feeds, exact=True)
    report = sess._engine.placement_report()
    assert "planned for x=[1,3,5]" in report, report


def test_declared_attributes_are_checked_at_import():
    """Op attributes are declared once (ops/op_table): wrong kinds and invalid values are refused at
    import with the node, op and attribute named."""
    import pytest

    w = numpy_helper.from_array(np.ones((2, 3, 3, 3), np.float32), "w")
    cases = [
        (helper.make_node("Conv", ["x", "w"], ["y"], name="c", strides=[0, 1]), "attribute 'strides' every value must be >= 1"),
        (helper.make_node("Conv", ["x", "w"], ["y"], name="c", group=0), "attribute 'group' must be >= 1"),
        (helper.make_node("Conv", ["x", "w"], ["y"], name="c", auto_pad="SAME"), "attribute 'auto_pad' must be NOTSET"),
        (helper.make_node("MaxPool", ["x"], ["y"], name="c"), "attribute 'kernel_shape' is required"),
        (helper.make_node("MaxPool", ["x"], ["y"], name="c", kernel_shape=[2, 2], pads=[0, -1, 0, 0]),
         "attribute 'pads' every value must be >= 0"),
        (helper.make_node("Softmax", ["x"], ["y"], name="c", axis=1.5), "attribute 'axis' must be an int, got a float"),
    ]
    for node, message in cases:
        graph = helper.make_graph(
            [node], "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w] if "w" in node.input else [])
        with pytest.raises(Exception) as err:
            kiln.InferenceSession(_model_bytes(graph), providers=["CPUExecutionProvider"])
        assert "node 'c'" in str(err.value) and message in str(err.value), str(err.value)
