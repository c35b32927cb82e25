"""Support vector machines (ai.onnx.ml SVMRegressor, SVMClassifier): scikit-learn's SVR, NuSVR,
OneClassSVM and SVC converted by skl2onnx, and single nodes written here for the layouts skl2onnx does
not emit, run by kiln and by onnxruntime on the same random inputs: labels equal, scores within a
relative 1e-5. Skipped where scikit-learn or skl2onnx is not installed."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import kiln

sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from onnx import TensorProto, helper  # noqa: E402
from sklearn.svm import SVC, SVR, NuSVR, OneClassSVM  # noqa: E402
from test_ml_ops import RTOL, classification, convert, fresh_inputs, regression, run_both  # noqa: E402


def check_outputs(model_bytes, x):
    """Labels equal; floats within RTOL, relative to each value and to the output's largest magnitude:
    onnxruntime sums the support vectors' terms in float32, so a value that largely cancels carries an
    absolute rounding error of ~1e-5 of the terms (SVC(kernel="linear") on 200 support vectors: 1.1e-5
    from scikit-learn's double decision_function, where kiln, summing in double, is 4e-7 from it)."""
    ref, got = run_both(model_bytes, x)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == r.dtype
        if r.dtype.kind in "iOU":
            np.testing.assert_array_equal(g, r)  # labels exactly
        else:
            np.testing.assert_allclose(g, r, rtol=RTOL, atol=RTOL * max(1.0, float(np.abs(r).max())))


def check_values(model, x_train):
    check_outputs(convert(model, x_train), fresh_inputs(x_train.shape[1]))


# ---- SVMRegressor

@pytest.mark.parametrize("kernel", ["linear", "poly", "rbf", "sigmoid"])
def test_svr(kernel):
    x, y = regression(features=5)
    check_values(SVR(kernel=kernel, C=3.0, gamma=0.2 if kernel == "sigmoid" else "scale").fit(x, y), x)


def test_nu_svr():
    x, y = regression(features=4, seed=3)
    check_values(NuSVR(kernel="rbf", nu=0.4).fit(x, y), x)


def test_one_class_svm():
    x, _ = regression(features=4)
    model = OneClassSVM(kernel="rbf", nu=0.2).fit(x)
    onx = skl2onnx.to_onnx(model, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    onx.ir_version = min(onx.ir_version, 10)
    check_outputs(onx.SerializeToString(), fresh_inputs(4) * 0.7)


# ---- SVMClassifier

def convert_svc(model, x):
    onx = skl2onnx.to_onnx(model, x[:1], options={id(model): {"zipmap": False}},
                           target_opset={"": 17, "ai.onnx.ml": 3})
    onx.ir_version = min(onx.ir_version, 10)
    return onx.SerializeToString()


@pytest.mark.parametrize("n_classes", [2, 3, 4])
@pytest.mark.parametrize("kernel", ["linear", "rbf", "poly"])
@pytest.mark.parametrize("probability", [False, True])
def test_svc(n_classes, kernel, probability):
    x, y = classification(n_classes, seed=n_classes)
    model = SVC(kernel=kernel, probability=probability, random_state=0).fit(x, y)
    check_outputs(convert_svc(model, x), fresh_inputs(x.shape[1]))


def test_svc_string_labels():
    x, y = classification(3)
    names = np.array(["cat", "dog", "eel"])[y]
    model = SVC(kernel="rbf", probability=True, random_state=0).fit(x, names)
    check_outputs(convert_svc(model, x), fresh_inputs(x.shape[1]))


# ---- single SVMClassifier nodes: the raw layouts

def svm_classifier(features, labels, **attrs):
    node = helper.make_node("SVMClassifier", ["X"], ["Y", "Z"], domain="ai.onnx.ml", **attrs)
    label_type = TensorProto.STRING if isinstance(labels[0], str) else TensorProto.INT64
    graph = helper.make_graph(
        [node], "svm", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, features])],
        [helper.make_tensor_value_info("Y", label_type, [None]),
         helper.make_tensor_value_info("Z", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 10
    return model.SerializeToString()


def svc_attrs(rng, classes, features, kernel="RBF"):
    per_class = [int(v) for v in rng.integers(1, 4, classes)]
    vectors = sum(per_class)
    pairs = classes * (classes - 1) // 2
    return dict(kernel_type=kernel, kernel_params=[0.3, 0.5, 2.0], vectors_per_class=per_class,
                support_vectors=rng.standard_normal(vectors * features).tolist(),
                coefficients=rng.standard_normal((classes - 1) * vectors).tolist(),
                rho=rng.standard_normal(pairs).tolist())


@pytest.mark.parametrize("classes", [2, 4, 5])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_svc_node_pairwise_scores(classes, post):
    rng = np.random.default_rng(classes)
    attrs = svc_attrs(rng, classes, 3)
    model = svm_classifier(3, list(range(classes)), classlabels_ints=list(range(classes)), post_transform=post, **attrs)
    check_outputs(model, fresh_inputs(3, rows=100))


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
def test_svc_node_probabilities(post):
    rng = np.random.default_rng(7)
    attrs = svc_attrs(rng, 4, 3, kernel="SIGMOID")
    pairs = 6
    model = svm_classifier(3, ["a"], classlabels_strings=["a", "b", "c", "d"], post_transform=post,
                           prob_a=(-rng.random(pairs) * 3).tolist(), prob_b=rng.standard_normal(pairs).tolist(), **attrs)
    check_outputs(model, fresh_inputs(3, rows=100))


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("signs", ["positive", "mixed"])
def test_linear_svm_node(classes, signs):
    # No support vectors: each class's score is x·w + rho[0]. Two classes with the first ahead: the
    # label is the second's where the first's score passes 0.5 (weights >= 0) or 0 (mixed).
    rng = np.random.default_rng(classes)
    w = rng.random((classes, 3)) * (1 if signs == "positive" else rng.choice([-1, 1], (classes, 3)))
    model = svm_classifier(3, [0], classlabels_ints=[3 + c for c in range(classes)], coefficients=w.ravel().tolist(),
                           rho=[-0.2], kernel_params=[0.5, 0.0, 3.0], kernel_type="RBF")
    check_outputs(model, np.abs(fresh_inputs(3, rows=200)) * (0.3 if signs == "positive" else 1))


def test_hostile_svm_is_an_error():
    bad = svm_classifier(2, [0], classlabels_ints=[0, 1], vectors_per_class=[1, 1 << 40], kernel_params=[0.5, 0.0, 3.0],
                         support_vectors=[1.0, 2.0, 3.0, 4.0], coefficients=[1.0, 1.0], rho=[0.0])
    with pytest.raises(Exception, match="vectors_per_class"):
        kiln.InferenceSession(bad, providers=["CPUExecutionProvider"]).run(None, {"X": np.zeros((1, 2), np.float32)})
