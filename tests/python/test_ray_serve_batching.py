"""kiln.ray_serve without Ray: the module imports, app() says how to install Ray, and the replica's
batching (merge by signature, split back, profile bounds, unbatched models) and KServe v2 JSON parsing
are checked directly. The deployment itself on Ray: tests/ray/test_ray_serve.py (not run by CI)."""

from __future__ import annotations

import importlib.util
import json
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import kiln
import kiln.ray_serve as rs


def model_file(tmp_path, x_shape, y_shape) -> str:
    """Y = Relu(X) * 2 with the given (possibly symbolic) shapes."""
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["X"], ["r"]), helper.make_node("Mul", ["r", "two"], ["Y"])], "relu2",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, y_shape)], [two])
    path = tmp_path / "relu2.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def expected(x):
    return np.maximum(x, 0) * 2


def feeds(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [{"X": rng.standard_normal(s).astype(np.float32)} for s in shapes]


def test_imports_without_ray():
    if importlib.util.find_spec("ray") is not None:
        pytest.skip("Ray is installed here")
    assert "ray" not in sys.modules
    with pytest.raises(ImportError, match=r'pip install "ray\[serve\]"'):
        rs.app("model.onnx")


def test_requests_of_one_signature_run_once_and_split_back(tmp_path):
    model = rs._Model(kiln.Engine.build(model_file(tmp_path, ["N", "C"], ["N", "C"]), device="cpu"))
    assert model.batched and model.max_rows is None
    batch = feeds([(1, 3), (2, 5), (3, 3), (1, 5), (4, 3)])
    results = model.run_many([model.check(f) for f in batch])
    for f, r in zip(batch, results):
        np.testing.assert_array_equal(r["Y"], expected(f["X"]))
    assert (model.requests, model.runs, model.rows) == (5, 2, 11)  # C=3 and C=5: two runs


def test_a_profile_bounds_the_rows_of_one_run(tmp_path):
    path = model_file(tmp_path, ["N", 3], ["N", 3])
    engine = kiln.Engine.build(path, device="cpu", profiles=[{"X": ([1, 3], [2, 3], [4, 3])}])
    model = rs._Model(engine)
    assert model.max_rows == 4
    batch = feeds([(2, 3), (2, 3), (3, 3), (1, 3)])
    results = model.run_many([model.check(f) for f in batch])
    for f, r in zip(batch, results):
        np.testing.assert_array_equal(r["Y"], expected(f["X"]))
    assert model.runs == 2  # 2+2, then 3+1


def test_a_request_the_engine_refuses_fails_alone(tmp_path):
    path = model_file(tmp_path, ["N", 3], ["N", 3])
    model = rs._Model(kiln.Engine.build(path, device="cpu", profiles=[{"X": ([1, 3], [2, 3], [4, 3])}]))
    batch = feeds([(1, 3), (6, 3), (2, 3)])  # 6 rows: past the profile's 4
    results = model.run_many([model.check(f) for f in batch])
    assert isinstance(results[1], kiln.KilnError), results[1]
    for i in (0, 2):
        np.testing.assert_array_equal(results[i]["Y"], expected(batch[i]["X"]))


def test_a_model_without_a_batch_dim_runs_requests_one_at_a_time(tmp_path):
    model = rs._Model(kiln.Engine.build(model_file(tmp_path, [2, 3], [2, 3]), device="cpu"))
    assert not model.batched
    batch = feeds([(2, 3)] * 3)
    results = model.run_many([model.check(f) for f in batch])
    for f, r in zip(batch, results):
        np.testing.assert_array_equal(r["Y"], expected(f["X"]))
    assert model.runs == 3


@pytest.mark.parametrize("request_, message", [
    ({"Z": np.zeros((1, 3), np.float32)}, "unknown input 'Z'"),
    ({"X": np.zeros((1, 3))}, "float32 in the model, got float64"),
    ({"X": np.zeros((1, 3, 1), np.float32)}, "has rank 2"),
    ({}, "missing input"),
    ({"X": [["a", "b", "c"]]}, "the list is not float32"),
    ([np.zeros((1, 3), np.float32)], "a dict of input name"),
])
def test_check_names_the_problem(tmp_path, request_, message):
    model = rs._Model(kiln.Engine.build(model_file(tmp_path, ["N", "C"], ["N", "C"]), device="cpu"))
    with pytest.raises(rs.RequestError, match=message):
        model.check(request_)


def test_v2_json_in_and_out(tmp_path):
    model = rs._Model(kiln.Engine.build(model_file(tmp_path, ["N", 3], ["N", 3]), device="cpu"))
    body = {"id": "7", "inputs": [{"name": "X", "shape": [2, 3], "datatype": "FP32", "data": [[1, -2, 3], [4, 5, -6]]}],
            "outputs": [{"name": "Y"}]}
    feed, names, request_id = rs.parse_v2_request(json.dumps(body).encode(), model)
    assert names == ["Y"] and request_id == "7" and feed["X"].shape == (2, 3) and feed["X"].dtype == np.float32
    (out,) = model.run_many([model.check(feed)])
    doc = rs.v2_response("relu2", out, names, request_id)
    assert doc == {"model_name": "relu2", "id": "7",
                   "outputs": [{"name": "Y", "datatype": "FP32", "shape": [2, 3], "data": [2, 0, 6, 8, 10, 0]}]}


@pytest.mark.parametrize("body", [
    b"not json", b"[]", b'{"inputs": []}', b'{"inputs": [7]}',
    b'{"inputs": [{"name": "X", "shape": [1, 3], "datatype": "INT64", "data": [1, 2, 3]}]}',
    b'{"inputs": [{"name": "X", "shape": [1, 3], "datatype": "FP32", "data": [1, 2]}]}',
    b'{"inputs": [{"name": "X", "shape": [1, true], "datatype": "FP32", "data": [1]}]}',
    b'{"inputs": [{"name": "X", "shape": [1, 3], "datatype": "FP32", "data": "abc"}]}',
    b'{"inputs": [{"name": "X", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}], "outputs": [{"name": "Q"}]}',
    b'\xff\xfe',
])
def test_malformed_v2_requests_raise_request_error(tmp_path, body):
    model = rs._Model(kiln.Engine.build(model_file(tmp_path, ["N", 3], ["N", 3]), device="cpu"))
    with pytest.raises(rs.RequestError):
        rs.parse_v2_request(body, model)
