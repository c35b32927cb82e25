"""ONNX Runtime's contrib ops (#44): com.microsoft Gelu, FastGelu, BiasGelu, QuickGelu, BiasAdd,
BiasSoftmax, SkipLayerNormalization, SkipSimplifiedLayerNormalization, EmbedLayerNormalization,
FusedMatMul, Attention, RotaryEmbedding and SimplifiedLayerNormalization (ai.onnx, as ONNX Runtime
registers it). kiln
lowers them to ai.onnx ops (passes/lower_contrib.cpp) and its fusions make its fused kernels of them
again. Each model is built here and compared with onnxruntime on the same random inputs (numpy where
onnxruntime's CPU provider lacks the op or the output), at opt levels 0 (lowered, unfused) and 2; the
fusions are checked in the optimized engine; tiny transformers optimized by onnxruntime.transformers run
as in ONNX Runtime."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln
from placement import ops_after

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MS = "com.microsoft"
RNG = np.random.default_rng(44)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def model(nodes, inputs, outputs, inits=None, opset=17):
    """A model of `nodes`: inputs {name: array} (their shapes, batch dims kept), outputs by name,
    initializers {name: array}. IR 10: onnxruntime 1.22 reads no later."""
    g = helper.make_graph(
        nodes, "contrib",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    m.ir_version = 10
    return m


def ort_run(m, feeds):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def kiln_engine(m, level):
    return kiln.Engine.build_from_bytes(m.SerializeToString(), opt_level=level)


def check(m, feeds, rtol=1e-5, atol=1e-5, want=None):
    """kiln at levels 0 and 2 against onnxruntime (or `want`: the outputs onnxruntime's CPU kernels
    cannot give); returns the optimized engine's op counts."""
    want = want or ort_run(m, feeds)
    for level in (0, 2):
        engine = kiln_engine(m, level)
        got = engine.create_context().run(feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), w, rtol=rtol, atol=atol, err_msg=f"opt level {level}")
    return ops_after(engine)


# ---- GELU family

@pytest.mark.parametrize("op,n_in", [("Gelu", 1), ("FastGelu", 1), ("FastGelu", 2), ("BiasGelu", 2)])
def test_gelu_family(op, n_in):
    names = ["x", "b"][:n_in]
    x, b = f32(2, 5, 16) * 3, f32(16)
    feeds = {"x": x, "b": b} if n_in == 2 else {"x": x}
    ops = check(model([helper.make_node(op, names, ["y"], domain=MS)], feeds, ["y"]), feeds)
    # (the placement report names op types without their domain: ai.onnx Gelu here)
    assert ops["Gelu"] == 1 and ops["Add"] == n_in - 1, dict(ops)


@pytest.mark.parametrize("alpha", [None, 1.0, 0.5])
def test_quick_gelu(alpha):
    x = f32(3, 7) * 4
    attrs = {} if alpha is None else {"alpha": alpha}
    ops = check(model([helper.make_node("QuickGelu", ["x"], ["y"], domain=MS, **attrs)], {"x": x}, ["y"]), {"x": x})
    assert ops["Swish"] == 1, dict(ops)


def test_fast_gelu_with_constant_bias_after_matmul_is_one_fused_product():
    """MatMul → FastGelu(bias): the bias and the tanh GELU end in one kiln.FusedMatMul."""
    x, w, b = f32(2, 4, 8), f32(8, 16), f32(16)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("FastGelu", ["h", "b"], ["y"], domain=MS)]
    ops = check(model(nodes, {"x": x}, ["y"], {"w": w, "b": b}), {"x": x})
    assert ops["FusedMatMul"] == 1 and ops["Gelu"] == 0 and ops["Add"] == 0 and ops["MatMul"] == 0, dict(ops)


def test_bias_add():
    """(onnxruntime has BiasAdd on CUDA only: numpy is the reference.)"""
    x, bias, skip = f32(2, 3, 8), f32(8), f32(2, 3, 8)
    feeds = {"x": x, "bias": bias, "skip": skip}
    m = model([helper.make_node("BiasAdd", ["x", "bias", "skip"], ["y"], domain=MS)], feeds, ["y"])
    check(m, feeds, want=[x + bias + skip])


@pytest.mark.parametrize("axis,inner,bias_shape", [(-1, 0, (1, 2, 4, 6)), (3, 1, (3, 1, 1, 6)), (2, 0, (4, 6)),
                                                    (1, 0, (2, 4, 6))])
def test_bias_softmax(axis, inner, bias_shape):
    """Softmax of data + bias over the dims from axis, flattened. (onnxruntime has BiasSoftmax on CUDA and
    ROCm only: numpy is the reference.)"""
    x, bias = f32(3, 2, 4, 6), f32(*bias_shape)
    feeds = {"x": x, "bias": bias}
    node = helper.make_node("BiasSoftmax", ["x", "bias"], ["y"], domain=MS, axis=axis, is_inner_broadcast=inner)
    s = x + bias
    a = axis % 4
    flat = s.reshape(*s.shape[:a], -1)
    e = np.exp(flat - flat.max(-1, keepdims=True))
    check(model([node], feeds, ["y"]), feeds, want=[(e / e.sum(-1, keepdims=True)).reshape(s.shape)])


# ---- Normalizations

@pytest.mark.parametrize("beta,bias,eps", [(True, True, None), (False, False, 1e-5), (True, False, 1e-3), (False, True, None)])
def test_skip_layer_norm(beta, bias, eps):
    x, skip = f32(2, 5, 32), f32(2, 5, 32)
    inits = {"gamma": f32(32), "beta": f32(32), "bias": f32(32)}
    ins = ["x", "skip", "gamma", "beta" if beta else "", "bias" if bias else ""]
    while ins[-1] == "":
        ins.pop()
    attrs = {} if eps is None else {"epsilon": eps}
    node = helper.make_node("SkipLayerNormalization", ins, ["y"], domain=MS, **attrs)
    ops = check(model([node], {"x": x, "skip": skip}, ["y"], inits), {"x": x, "skip": skip})
    assert ops["SkipLayerNorm"] == 1 and ops["LayerNormalization"] == 0, dict(ops)


def test_skip_layer_norm_sum_output_and_statistics():
    """input_skip_bias_sum matches onnxruntime; mean and inv_std_var (which onnxruntime's CPU kernel
    does not write) are LayerNormalization's statistics of the sum, shaped [..., 1]."""
    x, skip, gamma, beta, bias = f32(2, 3, 16), f32(2, 3, 16), f32(16), f32(16), f32(16)
    inits = {"gamma": gamma, "beta": beta, "bias": bias}
    feeds = {"x": x, "skip": skip}
    node = helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"], ["y", "", "", "sum"], domain=MS)
    ops = check(model([node], feeds, ["y", "sum"], inits), feeds)
    assert ops["SkipLayerNorm"] == 1, dict(ops)  # the fused kernel writes the sum too

    node = helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"], ["y", "mean", "inv", "sum"],
                            domain=MS, epsilon=1e-5)
    m = model([node], feeds, ["y", "mean", "inv", "sum"], inits)
    s = x + skip + bias
    mean = s.mean(-1, keepdims=True)
    inv = 1 / np.sqrt(((s - mean) ** 2).mean(-1, keepdims=True) + 1e-5)
    for level in (0, 2):
        y, got_mean, got_inv, got_sum = kiln_engine(m, level).create_context().run(feeds)
        np.testing.assert_allclose(got_sum, s, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(got_mean, mean, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got_inv, inv, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(y, (s - mean) * inv * gamma + beta, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bias,outputs", [(False, ["y"]), (True, ["y"]), (True, ["y", "", "inv", "sum"]),
                                          (False, ["y", "", "", "sum"]), (True, ["y", "", "inv"])])
def test_skip_simplified_layer_norm(bias, outputs):
    x, skip = f32(2, 4, 24), f32(2, 4, 24)
    inits = {"gamma": f32(24), "bias": f32(24)}
    feeds = {"x": x, "skip": skip}
    node = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"] + (["bias"] if bias else []),
                            outputs, domain=MS, epsilon=1e-6)
    m = model([node], feeds, [o for o in outputs if o], inits)
    want = ort_run(m, feeds)
    if "inv" in outputs:  # onnxruntime's CPU kernel does not write inv_std_var: numpy's of the sum
        s = x + skip + (inits["bias"] if bias else 0)
        assert want[1] is None
        want[1] = 1 / np.sqrt((s * s).mean(-1, keepdims=True) + 1e-6)
    ops = check(m, feeds, want=want)
    # The sum and its RMSNormalization are one kiln.SkipLayerNorm (simplified; with the bias, that of
    # x + skip and the bias).
    assert ops["SkipLayerNorm"] == 1 and ops["RMSNormalization"] == 0, dict(ops)


def test_skip_simplified_layer_norm_mean_is_refused():
    x, skip = f32(2, 4, 8), f32(2, 4, 8)
    node = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"], ["y", "mean"], domain=MS)
    m = model([node], {"x": x, "skip": skip}, ["y", "mean"], {"gamma": f32(8)})
    with pytest.raises(kiln.KilnError, match=r"SkipSimplifiedLayerNormalization.*mean.*RMS normalization has no mean"):
        kiln_engine(m, 2)


@pytest.mark.parametrize("axis,inv", [(-1, False), (-1, True), (1, True)])
def test_simplified_layer_norm(axis, inv):
    """RMSNorm as ONNX Runtime's optimizer writes it (ai.onnx domain, opset 1 of ORT's own schema)."""
    x = f32(2, 3, 8)
    scale = f32(*x.shape[axis:]) if axis > 0 else f32(8)
    outs = ["y", "inv"] if inv else ["y"]
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], outs, axis=axis, epsilon=1e-5)
    ops = check(model([node], {"x": x}, outs, {"scale": scale}), {"x": x})
    assert ops["RMSNormalization"] == 1, dict(ops)


@pytest.mark.parametrize("segments,mask,position_ids", [(True, True, False), (False, False, False), (True, False, True)])
def test_embed_layer_norm(segments, mask, position_ids):
    """BERT's embeddings: word + position (+ segment) lookups, LayerNorm; mask_index, embedding_sum."""
    B, S, H = 2, 5, 16
    feeds = {"ids": RNG.integers(0, 30, (B, S)).astype(np.int32)}
    if segments:
        feeds["seg"] = RNG.integers(0, 2, (B, S)).astype(np.int32)
    if mask:
        feeds["mask"] = np.array([[1] * 5, [1, 1, 1, 0, 0]], np.int32)
    if position_ids:  # (onnxruntime's shape inference needs mask_index among the outputs then)
        feeds["pos"] = np.array([[4, 3, 2, 1, 0], [0, 1, 2, 3, 4]], np.int32)
    inits = {"word": f32(30, H), "position": f32(8, H), "segment": f32(2, H), "gamma": f32(H), "beta": f32(H)}
    ins = ["ids", "seg" if segments else "", "word", "position", "segment" if segments else "", "gamma", "beta",
           "mask" if mask else "", "pos" if position_ids else ""]
    while ins[-1] == "":
        ins.pop()
    node = helper.make_node("EmbedLayerNormalization", ins, ["y", "mask_index", "sum"], domain=MS, epsilon=1e-5)
    m = model([node], feeds, ["y", "mask_index", "sum"], inits)
    m.graph.output[1].type.tensor_type.elem_type = TensorProto.INT32
    ops = check(m, feeds)
    assert ops["SkipLayerNorm"] == 1 and ops["LayerNormalization"] == 0, dict(ops)


def test_layer_norm_of_an_opset_before_17(tmp_path):
    """ONNX Runtime's optimizer writes LayerNormalization (its own, ai.onnx domain version 1) into models
    of any opset: below 17 kiln runs it as opset 17's, and its Add + LayerNormalization fuse."""
    x, skip = f32(2, 3, 8), f32(2, 3, 8)
    nodes = [helper.make_node("Add", ["x", "skip"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "g", "b"], ["y"], axis=-1, epsilon=1e-5)]
    feeds = {"x": x, "skip": skip}
    m = model(nodes, feeds, ["y"], {"g": f32(8), "b": f32(8)}, opset=12)
    ops = check(m, feeds)
    assert ops["SkipLayerNorm"] == 1, dict(ops)
    onnx.save(m, tmp_path / "m.onnx")
    r = subprocess.run([os.path.join(ROOT, "build", "kiln"), "info", str(tmp_path / "m.onnx")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "unsupported: none" in r.stdout, r.stdout + r.stderr


# ---- FusedMatMul

@pytest.mark.parametrize("transA,transB,batchA,batchB,alpha,const_b", [
    (0, 0, 0, 0, 1.0, False),
    (1, 0, 0, 0, 0.125, False),
    (0, 1, 0, 0, 0.5, True),
    (1, 1, 0, 0, 2.0, False),
    (0, 0, 1, 0, 1.0, False),
    (1, 0, 1, 0, 0.25, False),
    (0, 1, 0, 1, 1.5, True),
    (1, 1, 1, 1, 0.75, False),
])
def test_fused_matmul(transA, transB, batchA, batchB, alpha, const_b):
    def perm(rank, trans, batch):
        if batch:
            return list(range(1, rank - 1)) + ([rank - 1, 0] if trans else [0, rank - 1])
        return list(range(rank - 2)) + ([rank - 1, rank - 2] if trans else [rank - 2, rank - 1])

    def stored(read_shape, trans, batch):
        """The shape an operand must have to be read as `read_shape`."""
        p = perm(len(read_shape), trans, batch)
        s = [0] * len(read_shape)
        for i, k in enumerate(p):
            s[k] = read_shape[i]
        return tuple(s)

    a = f32(*stored((3, 2, 5, 4), transA, batchA))
    b = f32(*stored((3, 2, 4, 6), transB, batchB))
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, alpha=alpha, transA=transA, transB=transB,
                            transBatchA=batchA, transBatchB=batchB)
    feeds = {"a": a} if const_b else {"a": a, "b": b}
    m = model([node], feeds, ["y"], {"b": b} if const_b else None)
    ops = check(m, feeds, rtol=1e-5, atol=1e-5)
    # A constant B is transposed and scaled once, at build.
    if const_b:
        assert ops["Transpose"] == 0 and ops["Mul"] == 0, dict(ops)


def test_fused_matmul_broadcasts_and_fuses_bias():
    """A 2-D B against a 3-D A; the Add of a bias after it joins kiln's FusedMatMul."""
    a, w, bias = f32(2, 7, 8), f32(16, 8), f32(16)
    nodes = [helper.make_node("FusedMatMul", ["a", "w"], ["p"], domain=MS, transB=1, alpha=0.5),
             helper.make_node("Add", ["p", "bias"], ["y"])]
    ops = check(model(nodes, {"a": a}, ["y"], {"w": w, "bias": bias}), {"a": a})
    assert ops["FusedMatMul"] == 1 and ops["Add"] == 0 and ops["Transpose"] == 0, dict(ops)


def test_contrib_ops_in_subgraphs_are_lowered():
    """An If whose branches use contrib ops (lower-contrib-ops walks into subgraph bodies)."""
    x = f32(2, 3, 8) * 3
    branch = lambda op, name: helper.make_graph(  # noqa: E731
        [helper.make_node(op, ["x"], [name], domain=MS)], name, [], [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)])
    for flag in (True, False):
        feeds = {"x": x, "c": np.array(flag)}
        node = helper.make_node("If", ["c"], ["y"], then_branch=branch("FastGelu", "t"), else_branch=branch("QuickGelu", "e"))
        check(model([node], feeds, ["y"]), feeds)


def test_lowering_is_reported_and_cannot_be_disabled(tmp_path):
    x, skip = f32(2, 3, 8), f32(2, 3, 8)
    nodes = [helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma"], ["s"], domain=MS, name="sln"),
             helper.make_node("Gelu", ["s"], ["y"], domain=MS, name="gelu")]
    path = tmp_path / "m.onnx"
    onnx.save(model(nodes, {"x": x, "skip": skip}, ["y"], {"gamma": f32(8)}), path)
    cli = os.path.join(ROOT, "build", "kiln")
    r = subprocess.run([cli, "info", str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "unsupported: none" in r.stdout, r.stdout + r.stderr
    assert "com.microsoft.SkipLayerNormalization" in r.stdout, r.stdout  # the model as written
    r = subprocess.run([cli, "inspect", str(path), "--verbose"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[lower-contrib-ops] lowered node 'sln' (com.microsoft.SkipLayerNormalization)" in r.stdout, r.stdout
    assert "[lower-contrib-ops] lowered node 'gelu' (com.microsoft.Gelu)" in r.stdout, r.stdout
    r = subprocess.run([cli, "build", str(path), "-o", str(tmp_path / "m.kiln"), "-q", "--disable-pass", "lower-contrib-ops"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "cannot be disabled" in r.stdout + r.stderr, r.stdout + r.stderr


# ---- Attention (ONNX Runtime's BERT form)

def attention_model(mask=None, unidirectional=0, bias_input=False, scale=None, with_bias=True, heads=2):
    """x [2, 6, 16] → Attention(x, w [16, 48], b, mask_index, -, attention_bias) of `heads` heads."""
    B, S, E = 2, 6, 16
    feeds = {"x": f32(B, S, E)}
    inits = {"w": f32(E, 3 * E) * 0.5, "b": f32(3 * E)}
    ins = ["x", "w", "b" if with_bias else ""]
    if mask == "lengths":
        feeds["mask"] = np.array([6, 3], np.int32)
    elif mask == "2d":
        feeds["mask"] = np.array([[1] * 6, [1, 1, 1, 1, 0, 0]], np.int32)
    elif mask == "2d_left":
        # Query 0 of batch 0 sees key 0 only, which is padded. (Not two: a row of padded keys is a
        # softmax of scores near the filter, -10000, where float32 keeps 3 digits.)
        feeds["mask"] = np.array([[0, 1, 1, 1, 1, 1], [1] * 6], np.int32)
    elif mask == "3d":
        feeds["mask"] = (RNG.random((B, S, S)) > 0.3).astype(np.int32)
    ins.append("mask" if mask else "")
    if bias_input:
        ins += ["", "attention_bias"]
        feeds["attention_bias"] = f32(1, heads, S, S)
    while ins[-1] == "":
        ins.pop()
    attrs = {"num_heads": heads, "unidirectional": unidirectional}
    if scale is not None:
        attrs["scale"] = scale
    node = helper.make_node("Attention", ins, ["y"], domain=MS, **attrs)
    return model([node], feeds, ["y"], inits), feeds


@pytest.mark.parametrize("mask,unidirectional,bias_input,scale,with_bias", [
    (None, 0, False, None, True),
    ("2d", 0, False, None, True),
    ("lengths", 0, False, None, False),
    ("3d", 0, False, 0.3, True),
    ("2d_left", 1, False, None, True),   # causal and left padding: query 0 sees only a padded key
    ("2d", 0, True, None, True),
])
def test_attention(mask, unidirectional, bias_input, scale, with_bias):
    m, feeds = attention_model(mask, unidirectional, bias_input, scale, with_bias)
    want = None
    if not with_bias:  # onnxruntime 1.22's CPU kernel crashes without a bias: compare with a zero one
        ref = onnx.ModelProto()
        ref.CopyFrom(m)
        ref.graph.initializer.append(numpy_helper.from_array(np.zeros(48, np.float32), "zero_bias"))
        ref.graph.node[0].input[2] = "zero_bias"
        want = ort_run(ref, feeds)
    ops = check(m, feeds, rtol=1e-5, atol=1e-5, want=want)
    # One kiln.Attention reading the packed projection in place.
    assert ops["Attention"] == 1 and ops["Softmax"] == 0 and ops["Split"] == 0, dict(ops)


def test_attention_with_a_cache_is_refused():
    m, feeds = attention_model()
    m.graph.node[0].output.append("present")
    m.graph.output.append(helper.make_tensor_value_info("present", TensorProto.FLOAT, None))
    with pytest.raises(kiln.KilnError, match=r"Attention.*past and present"):
        kiln_engine(m, 2)


# ---- RotaryEmbedding (com.microsoft: lowered to ai.onnx RotaryEmbedding of opset 23)

def rotary_model(x, pos, rd_half, max_pos=24, **attrs):
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS, **attrs)
    angles = RNG.random((max_pos, rd_half)).astype(np.float32) * 6
    inits = {"cos": np.cos(angles), "sin": np.sin(angles)}
    return model([node], {"x": x, "pos": pos}, ["y"], inits), {"x": x, "pos": pos}


@pytest.mark.parametrize("layout,interleaved,rd,offset", [
    ("3d", 0, None, False), ("3d", 1, None, False), ("3d", 0, 4, False), ("3d", 1, 4, True),
    ("4d", 0, None, False), ("4d", 1, 6, False), ("4d", 0, None, True), ("3d_no_heads", 1, None, True)])
def test_rotary_embedding(layout, interleaved, rd, offset):
    """3-D [B, S, hidden] with num_heads (or without: heads of twice the caches' last dim) and 4-D
    [B, H, S, Dh] inputs, interleaved or not, over the whole head or its first rd values, at position_ids
    [B, S] or at one offset [1] (positions offset + s)."""
    B, S, H, D = 2, 5, 3, 8
    x = f32(B, S, H * D) if layout.startswith("3d") else f32(B, H, S, D)
    pos = np.array([7], np.int64) if offset else RNG.integers(0, 24, (B, S)).astype(np.int64)
    attrs = {"interleaved": interleaved}
    if layout == "3d" or rd:
        attrs["num_heads"] = H
    if rd:
        attrs["rotary_embedding_dim"] = rd
    m, feeds = rotary_model(x, pos, (rd or D) // 2, **attrs)
    check(m, feeds, rtol=1e-5, atol=1e-5)


def test_rotary_embedding_packed_batching_is_refused():
    m, _ = rotary_model(f32(1, 3, 8), np.zeros((1, 3), np.int64), 4, num_heads=1, is_packed_batching=1)
    with pytest.raises(kiln.KilnError, match=r"RotaryEmbedding.*is_packed_batching"):
        kiln_engine(m, 2)


# ---- Transformers optimized by ONNX Runtime's transformer optimizer

# tests/models/attention/ model → (model_type, contrib ops the optimizer writes into it, kiln's steps
# after optimization). export_tiny.py's networks have 4 heads of hidden size 64. opt_level=0: the
# optimizer's own fusions only (levels above 0 first run an onnxruntime session, which imports torch).
# GPT-2 keeps 2 of its 5 LayerNorms unfused, as in its original export: its attention's output
# projection is reshaped to a computed shape whose last dim kiln's type inference does not know.
ORT_OPTIMIZED = {
    "bert_default": ("bert", {"SkipLayerNormalization", "BiasGelu"}, {"SkipLayerNorm": 5, "Attention": 2, "Gelu": 0}),
    "gpt2_default": ("gpt2", {"SkipLayerNormalization", "FastGelu"}, {"SkipLayerNorm": 3, "Attention": 2, "Gelu": 0}),
    "llama_gqa_default": ("bert", {"SkipSimplifiedLayerNormalization"}, {"RMSNormalization": 1, "SkipLayerNorm": 4}),
    "vit_timm": ("vit", {"SkipLayerNormalization", "BiasGelu"}, {"SkipLayerNorm": 5, "Attention": 2, "Gelu": 0}),
}


@pytest.mark.parametrize("name", sorted(ORT_OPTIMIZED))
def test_transformers_optimized_by_onnxruntime(tmp_path, name):
    """A tiny transformer through onnxruntime.transformers.optimizer: its contrib ops run in kiln and match
    onnxruntime on the same inputs; kiln's fused kernels take them."""
    optimizer = pytest.importorskip("onnxruntime.transformers.optimizer")
    model_type, written, steps = ORT_OPTIMIZED[name]
    src = os.path.join(ROOT, "tests", "models", "attention", name + ".onnx")
    opt = optimizer.optimize_model(src, model_type=model_type, num_heads=4, hidden_size=64, opt_level=0, use_gpu=False)
    path = str(tmp_path / (name + "_ort.onnx"))
    opt.save_model_to_file(path)
    m = onnx.load(path)
    assert {n.op_type for n in m.graph.node if n.domain == MS} == written
    if name == "vit_timm":
        feeds = {"x": f32(2, 3, 32, 32)}
    else:
        mask = np.ones((2, 12), np.int64)
        mask[1, 8:] = 0
        feeds = {"input_ids": RNG.integers(0, 128, (2, 12)).astype(np.int64), "attention_mask": mask}
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    engine = kiln.Engine.build(path)
    got = engine.create_context().run(feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-4)
    ops = ops_after(engine)
    assert {op: ops[op] for op in steps} == steps, dict(ops)
