"""LightGBM and XGBoost models converted by onnxmltools (ai.onnx.ml TreeEnsembleClassifier/Regressor
with the converters' own post transforms, base values and missing-value branches), trained here on
synthetic data, run by kiln and compared with onnxruntime on the same inputs, NaNs among them: labels
equal, probabilities and values within 1e-5. Skipped where a producer is not installed."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import kiln

onnxmltools = pytest.importorskip("onnxmltools")

from onnxmltools.convert.common.data_types import FloatTensorType  # noqa: E402
from sklearn.datasets import make_classification, make_regression  # noqa: E402

FEATURES = 8
OPSET = 15  # the newest opset onnxmltools 1.16 converts to


def data(kind: str, classes: int = 2):
    if kind == "regression":
        x, y = make_regression(400, FEATURES, noise=0.5, random_state=1)
    else:
        x, y = make_classification(400, FEATURES, n_informative=5, n_classes=classes, random_state=1)
    x = x.astype(np.float32)
    x[::17, 3] = np.nan  # the boosters learn a missing-value direction per split
    return x, y


def queries(rows: int = 64) -> np.ndarray:
    rng = np.random.default_rng(5)
    q = (rng.standard_normal((rows, FEATURES)) * 1.5).astype(np.float32)
    q[::5, 3] = np.nan
    q[::7, 0] = np.nan
    return q


def compare(onx, x: np.ndarray) -> None:
    model = onx.SerializeToString()
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    name = ref.get_inputs()[0].name
    want = ref.run(None, {name: x})
    for rows in (1, x.shape[0]):  # few rows split the trees between threads, many the rows
        got = kiln.InferenceSession(model).run(None, {name: x[:rows]})
        assert len(got) == len(want)
        for g, w in zip(got, want):
            w = w[:rows]
            if isinstance(w, list):  # ZipMap: a list of {label: probability}
                assert [list(d) for d in g] == [list(d) for d in w]
                np.testing.assert_allclose([list(d.values()) for d in g], [list(d.values()) for d in w],
                                           rtol=1e-5, atol=1e-6)
            elif w.dtype.kind in "iuU":
                np.testing.assert_array_equal(np.asarray(g).reshape(w.shape), w)
            else:
                np.testing.assert_allclose(np.asarray(g).reshape(w.shape), w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("zipmap", [False, True])
def test_lightgbm_classifier(classes, zipmap):
    lightgbm = pytest.importorskip("lightgbm")
    x, y = data("classification", classes)
    m = lightgbm.LGBMClassifier(n_estimators=40, num_leaves=15, verbose=-1, random_state=0).fit(x, y)
    onx = onnxmltools.convert_lightgbm(m, initial_types=[("x", FloatTensorType([None, FEATURES]))],
                                       target_opset=OPSET, zipmap=zipmap)
    assert any(n.op_type == "TreeEnsembleClassifier" for n in onx.graph.node)
    compare(onx, queries())


@pytest.mark.parametrize("objective", ["regression", "huber"])
def test_lightgbm_regressor(objective):
    lightgbm = pytest.importorskip("lightgbm")
    x, y = data("regression")
    m = lightgbm.LGBMRegressor(n_estimators=60, objective=objective, verbose=-1, random_state=0).fit(x, y)
    onx = onnxmltools.convert_lightgbm(m, initial_types=[("x", FloatTensorType([None, FEATURES]))], target_opset=OPSET)
    assert any(n.op_type == "TreeEnsembleRegressor" for n in onx.graph.node)
    compare(onx, queries())


@pytest.mark.parametrize("classes", [2, 3])
def test_xgboost_classifier(classes):
    xgboost = pytest.importorskip("xgboost")
    x, y = data("classification", classes)
    m = xgboost.XGBClassifier(n_estimators=40, max_depth=4, random_state=0).fit(x, y)
    onx = onnxmltools.convert_xgboost(m, initial_types=[("x", FloatTensorType([None, FEATURES]))], target_opset=OPSET)
    assert any(n.op_type == "TreeEnsembleClassifier" for n in onx.graph.node)
    compare(onx, queries())
    # The converted model agrees with XGBoost itself (NaN is XGBoost's missing value).
    q = queries()
    got = kiln.InferenceSession(onx.SerializeToString()).run(None, {"x": q})
    np.testing.assert_array_equal(got[0], m.predict(q))
    np.testing.assert_allclose(got[1], m.predict_proba(q), rtol=1e-4, atol=1e-5)


def test_xgboost_regressor():
    xgboost = pytest.importorskip("xgboost")
    x, y = data("regression")
    m = xgboost.XGBRegressor(n_estimators=60, max_depth=5, random_state=0).fit(x, y)
    onx = onnxmltools.convert_xgboost(m, initial_types=[("x", FloatTensorType([None, FEATURES]))], target_opset=OPSET)
    compare(onx, queries())
    q = queries()
    got = kiln.InferenceSession(onx.SerializeToString()).run(None, {"x": q})[0]
    np.testing.assert_allclose(got.ravel(), m.predict(q), rtol=1e-4, atol=1e-3)
