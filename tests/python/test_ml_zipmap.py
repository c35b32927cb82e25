"""scikit-learn classifiers converted by skl2onnx with its defaults end in ai.onnx.ml ZipMap: their
probabilities as a list of {label: probability} maps. kiln's values hold no maps, so the importer keeps
the [N, C] tensor under the output's name and records the labels (src/onnx/importer.cpp); the Python
session gives what onnxruntime gives. Checked against onnxruntime on the same inputs: labels equal,
keys and key types equal, probabilities within 1e-5; get_outputs() types as onnxruntime's; the C++ engine
gives the tensor. Skipped where scikit-learn or skl2onnx is not installed."""

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
