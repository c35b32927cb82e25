"""Map values at a model's edges. scikit-learn classifiers converted by skl2onnx with its defaults end in
ai.onnx.ml ZipMap: their probabilities as a list of {label: probability} maps. kiln's values hold no
maps, so the importer keeps the [N, C] tensor under the output's name and records the labels
(src/onnx/importer.cpp); the Python session gives what onnxruntime gives. Checked against onnxruntime on
the same inputs: labels equal, keys and key types equal, probabilities within 1e-5; get_outputs() types
as onnxruntime's; the C++ engine gives the tensor. A DictVectorizer reading a map input (a scikit-learn
pipeline over dicts) is the same in reverse: the input is the dense row, the session takes the map.
Skipped where scikit-learn or skl2onnx is not installed."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import kiln

sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from sklearn.datasets import make_classification  # noqa: E402
from sklearn.ensemble import RandomForestClassifier  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402


def default_conversion(model, x) -> bytes:
    onx = skl2onnx.to_onnx(model, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    onx.ir_version = min(onx.ir_version, 10)
    assert any(n.op_type == "ZipMap" for n in onx.graph.node)
    return onx.SerializeToString()


def data(classes: int):
    x, y = make_classification(n_samples=120, n_features=6, n_informative=4, n_classes=classes, random_state=3)
    return x.astype(np.float32), y


@pytest.mark.parametrize("labels", ["int", "str"])
@pytest.mark.parametrize("estimator", [LogisticRegression(max_iter=500), RandomForestClassifier(n_estimators=5, random_state=0)],
                         ids=["logistic", "forest"])
def test_default_zipmap_outputs_match_onnxruntime(estimator, labels):
    x, y = data(3)
    if labels == "str":
        y = np.array(["cat", "dog", "émeu"])[y]
    model = estimator.fit(x, y)
    onx = default_conversion(model, x)
    want = ort.InferenceSession(onx, providers=["CPUExecutionProvider"]).run(None, {"X": x[:7]})
    sess = kiln.InferenceSession(onx)
    got = sess.run(None, {"X": x[:7]})
    np.testing.assert_array_equal(got[0], want[0])
    assert isinstance(got[1], list) and len(got[1]) == 7
    for g, w in zip(got[1], want[1]):
        assert list(g.keys()) == list(w.keys())
        assert all(type(a) is type(b) for a, b in zip(g.keys(), w.keys()))
        np.testing.assert_allclose(list(g.values()), list(w.values()), rtol=1e-5, atol=1e-6)
    ort_types = [o.type for o in ort.InferenceSession(onx, providers=["CPUExecutionProvider"]).get_outputs()]
    assert [o.type for o in sess.get_outputs()] == ort_types, ort_types
    assert "kiln.zipmap.output_probability" not in sess.get_modelmeta().custom_metadata_map
    # Only the requested output, by name.
    probs, = sess.run(["output_probability"], {"X": x[:2]})
    assert len(probs) == 2 and set(probs[0]) == set(want[1][0])


def test_the_engine_gives_the_probability_tensor():
    x, y = data(2)
    onx = default_conversion(LogisticRegression().fit(x, y), x)
    engine = kiln.Engine.build_from_bytes(onx, base_dir=".")
    names = [o.name for o in engine.outputs]
    assert names == ["output_label", "output_probability"]
    out = engine.create_context().run({"X": x[:4]})
    assert out[1].shape == (4, 2) and out[1].dtype == np.float32
    np.testing.assert_allclose(out[1].sum(axis=1), 1, rtol=1e-5)


# ---- DictVectorizer on a map input: the map becomes the dense row [1, vocabulary] (importer.cpp)


def dict_pipeline() -> bytes:
    from skl2onnx.common.data_types import DictionaryType, FloatTensorType, StringTensorType
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.pipeline import make_pipeline

    data = [{"a": 1.0, "b": 2.0}, {"b": 3.0, "c": -1.0}, {"a": 0.5, "c": 4.0}, {"a": 2.0, "é": 1.5}, {"b": -2.0}]
    pipe = make_pipeline(DictVectorizer(sparse=False), LogisticRegression()).fit(data, [0, 1, 0, 1, 1])
    onx = skl2onnx.convert_sklearn(pipe, initial_types=[("input", DictionaryType(StringTensorType([1]), FloatTensorType([])))],
                                   target_opset={"": 17, "ai.onnx.ml": 3}, options={LogisticRegression: {"zipmap": False}})
    onx.ir_version = min(onx.ir_version, 10)
    assert [n.op_type for n in onx.graph.node][0] == "DictVectorizer"
    return onx.SerializeToString()


@pytest.mark.parametrize("feed", [{"a": 1.0, "c": 2.0}, {"a": 1.0, "zz": 5.0}, {"é": 3.0, "b": 0.25}])
def test_dict_vectorizer_pipeline_matches_onnxruntime(feed):
    onx = dict_pipeline()
    ref = ort.InferenceSession(onx, providers=["CPUExecutionProvider"])
    sess = kiln.InferenceSession(onx)
    want, got = ref.run(None, {"input": feed}), sess.run(None, {"input": feed})
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
    assert [(i.name, i.type, i.shape) for i in sess.get_inputs()] == [(i.name, i.type, i.shape) for i in ref.get_inputs()]
    assert not any("dictvectorizer" in k for k in sess.get_modelmeta().custom_metadata_map)
    with pytest.raises(kiln.KilnError, match=r"input 'input' is a map with string keys; got the key 1"):
        sess.run(None, {"input": {1: 1.0}})


def test_dict_vectorizer_int64_keys_and_the_dense_row():
    """A hand-made DictVectorizer over int64 keys (one repeated: every position it has gets the value,
    as in onnxruntime) and float values as the graph's output; a key of another type is an error naming
    the input; the engine (C++ API) takes the dense row itself, and a session of the saved engine takes
    the map."""
    from onnx import TensorProto, helper

    vt = helper.make_tensor_type_proto(TensorProto.FLOAT, None)
    x = helper.make_value_info("m", helper.make_map_type_proto(TensorProto.INT64, vt))
    node = helper.make_node("DictVectorizer", ["m"], ["y"], domain="ai.onnx.ml", int64_vocabulary=[3, 7, 11, 7])
    g = helper.make_graph([node], "dv", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)])
    m.ir_version = 10
    onx = m.SerializeToString()
    feed = {"m": {7: 2.5, 11: -1.0, 5: 9.0}}
    want = ort.InferenceSession(onx, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got = kiln.InferenceSession(onx).run(None, feed)[0]
    np.testing.assert_array_equal(got, want)
    assert got.shape == (1, 4) and got.dtype == np.float32 and got[0, 3] == 2.5
    for bad in ("x", True, 2**64):
        with pytest.raises(kiln.KilnError, match=r"input 'm' is a map with int64 keys; got the key"):
            kiln.InferenceSession(onx).run(None, {"m": {bad: 1.0}})
    engine = kiln.Engine.build_from_bytes(onx, base_dir=".")
    row = np.array([[0.0, 2.5, -1.0, 2.5]], np.float32)
    np.testing.assert_array_equal(engine.create_context().run({"m": row})[0], row)
    np.testing.assert_array_equal(kiln.InferenceSession(engine.serialize()).run(None, feed)[0], want)


def dv_model(vocabulary, *, map_is_output=False, metadata=None) -> bytes:
    from onnx import TensorProto, helper

    vt = helper.make_tensor_type_proto(TensorProto.FLOAT, None)
    mt = helper.make_map_type_proto(TensorProto.STRING, vt)
    node = helper.make_node("DictVectorizer", ["m"], ["y"], domain="ai.onnx.ml", string_vocabulary=vocabulary)
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if map_is_output:
        outputs.append(helper.make_value_info("m", mt))
    g = helper.make_graph([node], "dv", [helper.make_value_info("m", mt)], outputs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)])
    m.ir_version = 10
    for k, v in (metadata or {}).items():
        m.metadata_props.add(key=k, value=v)
    return m.SerializeToString()


def test_dict_vectorizer_records_are_kilns_own():
    """The records kiln keeps in a model's metadata are written from the graph: a model cannot claim
    them. A plain tensor input named in a kiln.dictvectorizer or kiln.castmap record and a plain tensor output named in a
    kiln.zipmap record stay tensors, and a vocabulary holding bytes that are not UTF-8 still makes a
    record that parses (the map input keeps taking a dict)."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "plain", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    for k, v in {"kiln.dictvectorizer.x": '{"keys": "string", "vocabulary": ["a", "b"]}',
                 "kiln.castmap.x": '{"values": "float", "cast_to": "TO_FLOAT", "map_form": "SPARSE", "max_map": 2}',
                 "kiln.zipmap.y": '{"keys": "int64", "labels": [0, 1]}', "author": "me"}.items():
        m.metadata_props.add(key=k, value=v)
    sess = kiln.InferenceSession(m.SerializeToString())
    assert [(i.name, i.type) for i in sess.get_inputs()] == [("x", "tensor(float)")]
    got = sess.run(None, {"x": np.array([[-1.0, 2.0]], np.float32)})[0]
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, [[0.0, 2.0]])
    meta = sess.get_modelmeta().custom_metadata_map
    assert meta.get("author") == "me" and not any(k.startswith("kiln.") for k in meta)
    # Bytes outside valid UTF-8 (a stray byte, an overlong NUL, a UTF-16 surrogate) are the keys Python's
    # surrogateescape reads them as, and only those: "ÿþq" is another key.
    raw = [b"\xff\xfeq", b"\xc0\x80", b"\xed\xa0\x80", "b".encode(), "café".encode()]
    odd = kiln.InferenceSession(dv_model(raw))
    keys = [k.decode("utf-8", "surrogateescape") for k in raw]
    got = odd.run(None, {"m": {keys[0]: 1.0, keys[1]: 3.0, keys[2]: 4.0, "b": 2.0, "café": 5.0, "ÿþq": 9.0}})[0]
    np.testing.assert_array_equal(got, [[1.0, 3.0, 4.0, 2.0, 5.0]])


def test_a_map_input_that_is_also_an_output_or_read_in_a_subgraph_is_refused():
    """A DictVectorizer's map input becomes the dense row only where the DictVectorizer is all that reads
    it: one the graph also returns (the output would be the row, not the map) or a subgraph reads (its
    copy would stay a map) is refused with an error naming the map and why."""
    from onnx import TensorProto, helper

    with pytest.raises(kiln.KilnError, match=r"map input 'm' is read by .*DictVectorizer.* is also a graph output"):
        kiln.InferenceSession(dv_model(["a", "b"], map_is_output=True))
    vt = helper.make_tensor_type_proto(TensorProto.FLOAT, None)
    mt = helper.make_map_type_proto(TensorProto.STRING, vt)
    branch = helper.make_graph([helper.make_node("DictVectorizer", ["m"], ["z"], domain="ai.onnx.ml", string_vocabulary=["a"])],
                               "branch", [], [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("DictVectorizer", ["m"], ["y"], domain="ai.onnx.ml", string_vocabulary=["a", "b"]),
             helper.make_node("If", ["c"], ["w"], then_branch=branch, else_branch=branch)]
    g = helper.make_graph(nodes, "dv_if", [helper.make_value_info("m", mt), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("w", TensorProto.FLOAT, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 10
    with pytest.raises(kiln.KilnError, match=r"map input 'm' is read by .*DictVectorizer.* is read inside a subgraph"):
        kiln.InferenceSession(model.SerializeToString())
