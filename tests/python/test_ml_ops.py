"""scikit-learn models converted by skl2onnx (ai.onnx.ml: TreeEnsembleClassifier/Regressor,
LinearClassifier/Regressor, Scaler, Normalizer, Imputer, OneHotEncoder, FeatureVectorizer; single
CategoryMapper and FeatureVectorizer nodes for the forms skl2onnx does not emit), run by kiln and by
onnxruntime on the same random inputs: labels equal, probabilities and values within a relative 1e-5.

Classifiers are converted without ZipMap here; skl2onnx's default conversions with it are
test_ml_zipmap.py's. Skipped where scikit-learn or
skl2onnx is not installed."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import kiln

sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from sklearn.datasets import make_classification, make_regression  # noqa: E402
from sklearn.ensemble import (  # noqa: E402
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.impute import SimpleImputer  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge  # noqa: E402
from sklearn.pipeline import Pipeline  # noqa: E402
from sklearn.preprocessing import Normalizer, OneHotEncoder, StandardScaler  # noqa: E402
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6


def convert(model, x):
    options = {id(model): {"zipmap": False}} if hasattr(model, "predict_proba") else None
    onx = skl2onnx.to_onnx(model, x[:1], options=options, target_opset={"": 17, "ai.onnx.ml": 3})
    onx.ir_version = min(onx.ir_version, 10)  # the newest onnxruntime here reads IR 10
    return onx.SerializeToString()


def run_both(model_bytes, x):
    ref = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    got = kiln.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    name = ref.get_inputs()[0].name
    return ref.run(None, {name: x}), got.run(None, {name: x})


def classification(n_classes, n=300, features=6, seed=0):
    x, y = make_classification(n, features, n_informative=4, n_classes=n_classes, random_state=seed)
    return x.astype(np.float32), y


def regression(n=300, features=6, seed=0, targets=1):
    x, y = make_regression(n, features, n_targets=targets, noise=0.5, random_state=seed)
    return x.astype(np.float32), y


def fresh_inputs(features, rows=200, seed=1):
    return np.random.default_rng(seed).standard_normal((rows, features)).astype(np.float32) * 1.5


def check_classifier(model, x_train):
    x = fresh_inputs(x_train.shape[1])
    (ref_label, ref_prob), (label, prob) = run_both(convert(model, x_train), x)
    assert prob.shape == ref_prob.shape
    np.testing.assert_allclose(prob, ref_prob, rtol=RTOL, atol=ATOL)
    # Labels equal wherever the top two scores are apart by more than the tolerance (a near tie may
    # break either way between float and double sums).
    top2 = np.sort(ref_prob, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 1e-5
    assert clear.mean() > 0.5
    np.testing.assert_array_equal(label[clear], ref_label[clear])
    assert label.dtype == ref_label.dtype


def check_values(model, x_train, x=None):
    x = fresh_inputs(x_train.shape[1]) if x is None else x
    ref, got = run_both(convert(model, x_train), x)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == r.dtype
        np.testing.assert_allclose(g, r, rtol=RTOL, atol=ATOL)


# ---- tree ensembles

@pytest.mark.parametrize("n_classes", [2, 3])
def test_decision_tree_classifier(n_classes):
    x, y = classification(n_classes)
    check_classifier(DecisionTreeClassifier(max_depth=6, random_state=0).fit(x, y), x)


@pytest.mark.parametrize("n_classes", [2, 4])
def test_random_forest_classifier(n_classes):
    x, y = classification(n_classes)
    check_classifier(RandomForestClassifier(n_estimators=12, max_depth=5, random_state=0).fit(x, y), x)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_gradient_boosting_classifier(n_classes):
    x, y = classification(n_classes)
    model = GradientBoostingClassifier(n_estimators=20, max_depth=3, random_state=0).fit(x, y)
    check_classifier(model, x)


def test_tree_classifier_string_labels():
    x, y = classification(3)
    names = np.array(["cat", "dog", "eel"])[y]
    check_classifier(RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0).fit(x, names), x)


def test_decision_tree_regressor():
    x, y = regression()
    check_values(DecisionTreeRegressor(max_depth=6, random_state=0).fit(x, y), x)


def test_random_forest_regressor_two_targets():
    x, y = regression(targets=2)
    check_values(RandomForestRegressor(n_estimators=10, max_depth=5, random_state=0).fit(x, y), x)


def test_gradient_boosting_regressor():
    x, y = regression()
    check_values(GradientBoostingRegressor(n_estimators=30, max_depth=3, random_state=0).fit(x, y), x)


# ---- linear models and preprocessing

@pytest.mark.parametrize("n_classes", [2, 3])
def test_logistic_regression(n_classes):
    x, y = classification(n_classes)
    check_classifier(LogisticRegression(max_iter=500).fit(x, y), x)


def test_linear_regression_and_ridge():
    x, y = regression()
    check_values(LinearRegression().fit(x, y), x)
    x2, y2 = regression(targets=3, seed=2)
    check_values(Ridge(alpha=0.5).fit(x2, y2), x2)


def test_pipeline_scaler_logistic_regression():
    x, y = classification(3)
    pipe = Pipeline([("scale", StandardScaler()), ("lr", LogisticRegression(max_iter=500))]).fit(x, y)
    x_new = fresh_inputs(x.shape[1])
    onx = skl2onnx.to_onnx(pipe, x[:1], options={id(pipe.steps[-1][1]): {"zipmap": False}},
                           target_opset={"": 17, "ai.onnx.ml": 3})
    onx.ir_version = min(onx.ir_version, 10)
    (ref_label, ref_prob), (label, prob) = run_both(onx.SerializeToString(), x_new)
    np.testing.assert_allclose(prob, ref_prob, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(label, ref_label)


def test_simple_imputer():
    x, _ = regression()
    x[::7, 2] = np.nan
    x_new = fresh_inputs(x.shape[1])
    x_new[::3, 0] = np.nan
    x_new[1::5, 4] = np.nan
    check_values(SimpleImputer(strategy="mean").fit(x), x, x_new)


def test_standard_scaler():
    x, _ = regression()
    check_values(StandardScaler().fit(x), x)


@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
def test_normalizer(norm):
    x, _ = regression()
    x_new = fresh_inputs(x.shape[1])
    x_new[3] = 0  # a zero row
    check_values(Normalizer(norm=norm).fit(x), x, x_new)


def test_one_hot_encoder():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 5, (100, 3)).astype(np.int64)
    model = OneHotEncoder(handle_unknown="ignore").fit(x)
    x_new = rng.integers(0, 7, (50, 3)).astype(np.int64)  # 5 and 6 are unknown: zeros
    check_values(model, x, x_new)


def test_one_hot_encoder_strings():
    rng = np.random.default_rng(1)
    words = np.array(["red", "green", "blue", "teal"])
    x = words[rng.integers(0, 3, (60, 2))]
    model = OneHotEncoder(handle_unknown="ignore").fit(x)
    check_values(model, x, words[rng.integers(0, 4, (40, 2))])


# ---- FeatureVectorizer and CategoryMapper

def run_feeds(model_bytes, feeds):
    ref = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = kiln.InferenceSession(model_bytes, providers=["CPUExecutionProvider"]).run(None, feeds)
    return ref, got


def test_feature_vectorizer_from_a_two_input_normalizer():
    # skl2onnx joins a model's several inputs with a FeatureVectorizer.
    from skl2onnx.common.data_types import FloatTensorType

    x, _ = regression(features=5)
    onx = skl2onnx.convert_sklearn(Normalizer(norm="l2").fit(x), initial_types=[
        ("a", FloatTensorType([None, 2])), ("b", FloatTensorType([None, 3]))], target_opset={"": 17, "ai.onnx.ml": 3})
    assert "FeatureVectorizer" in [n.op_type for n in onx.graph.node]
    onx.ir_version = min(onx.ir_version, 10)
    x_new = fresh_inputs(5)
    ref, got = run_feeds(onx.SerializeToString(), {"a": x_new[:, :2].copy(), "b": x_new[:, 2:].copy()})
    np.testing.assert_allclose(got[0], ref[0], rtol=RTOL, atol=ATOL)


def ml_node(op, inputs, out_type, **attrs):
    from onnx import helper

    node = helper.make_node(op, [name for name, _ in inputs], ["Y"], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info(name, t, None) for name, t in inputs],
                              [helper.make_tensor_value_info("Y", out_type, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 10
    return model.SerializeToString()


@pytest.mark.parametrize("dims", [[3, 2], [4, 2], [2, 1], [3, 0]])  # exact, zero-padded, cut, an empty input
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
def test_feature_vectorizer_node(dims, dtype):
    from onnx import TensorProto, helper

    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = ml_node("FeatureVectorizer", [("a", t), ("b", t)], TensorProto.FLOAT, inputdimensions=dims)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((5, 3)) * 10).astype(dtype), (rng.standard_normal((5, 2)) * 10).astype(dtype)
    for feeds in ({"a": a, "b": b}, {"a": a.reshape(5, 1, 3), "b": b}, {"a": a[0], "b": b[0]}):
        ref, got = run_feeds(model, feeds)
        assert got[0].shape == ref[0].shape and got[0].dtype == ref[0].dtype
        np.testing.assert_array_equal(got[0], ref[0])


@pytest.mark.parametrize("direction", ["to_int", "to_string"])
def test_category_mapper_node(direction):
    from onnx import TensorProto

    cats = dict(cats_int64s=[7, 3, 9, 3], cats_strings=["cat", "dog", "eel", "fox"])  # 3 repeats: its last partner
    if direction == "to_int":
        model = ml_node("CategoryMapper", [("x", TensorProto.STRING)], TensorProto.INT64, default_int64=-5, **cats)
        x = np.array([["cat", "fox", "gnu"], ["dog", "eel", ""]], dtype=object)
    else:
        model = ml_node("CategoryMapper", [("x", TensorProto.INT64)], TensorProto.STRING, default_string="?", **cats)
        x = np.array([[7, 3, 0], [9, -1, 3]], dtype=np.int64)
    ref, got = run_feeds(model, {"x": x})
    assert got[0].shape == ref[0].shape
    np.testing.assert_array_equal(got[0], ref[0])
