"""Optimizer tests on exporter-shaped ONNX graphs: each fusion fires (counted from the engine's
placement report) and the outputs match the unoptimized engine (opt level 0) on random inputs.

The zoo checks run on the real exported models when they exist (build/zoo, or $KILN_ZOO_DIR)."""

from __future__ import annotations

import os
import re
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln
from placement import ops_after

RNG = np.random.default_rng(0)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ZOO_DIR = os.environ.get("KILN_ZOO_DIR", os.path.join(ROOT, "build", "zoo"))


def build(model: onnx.ModelProto | str, level: int):
    if isinstance(model, str):
        return kiln.Engine.build(model, opt_level=level)
    return kiln.Engine.build_from_bytes(model.SerializeToString(), opt_level=level)


def run(engine, feeds):
    return engine.create_context().run(feeds)


def assert_same(model, feeds, rtol=1e-4, atol=1e-4, level=2):
    ref = run(build(model, 0), feeds)
    opt = build(model, level)
    got = run(opt, feeds)
    assert len(ref) == len(got)
    for r, g in zip(ref, got):
        np.testing.assert_allclose(g, r, rtol=rtol, atol=atol)
    return ops_after(opt)


def const(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def make(nodes, inputs, outputs, inits, opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---- BERT-like encoder layer, as HuggingFace's eager BertSelfAttention exports it
def bert_layer(opset=17, batch="batch", seq=8, heads=2, head=4, div=True, computed_shapes=False):
    """computed_shapes: the head split/merge shapes are computed from the input's (unnamed) batch dim
    and hold -1 (transformers 5 exports: view(B, S, -1, D), reshape(B, S, -1))."""
    e = heads * head
    nodes, inits = [], []

    def lin(x, name, n_in, n_out):
        inits.extend([const(name + ".w", f32(n_in, n_out)), const(name + ".b", f32(n_out))])
        nodes.append(helper.make_node("MatMul", [x, name + ".w"], [name + ".mm"]))
        nodes.append(helper.make_node("Add", [name + ".mm", name + ".b"], [name]))
        return name

    if computed_shapes:
        batch = None
        inits += [const("zero", np.array(0, np.int64)), const("ax0", np.array([0], np.int64)),
                  const("seq_head", np.array([seq, -1, head], np.int64)), const("seq_rest", np.array([seq, -1], np.int64))]
        nodes += [helper.make_node("Shape", ["x"], ["xs"]),
                  helper.make_node("Gather", ["xs", "zero"], ["b"], axis=0),
                  helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
                  helper.make_node("Concat", ["b1", "seq_head"], ["split_shape"], axis=0),
                  helper.make_node("Concat", ["b1", "seq_rest"], ["merge_shape"], axis=0)]
    else:
        inits += [const("split_shape", np.array([0, 0, heads, head], np.int64)),
                  const("merge_shape", np.array([0, 0, e], np.int64))]
    inits += [const("scale", np.array(np.sqrt(head), np.float32)),
              const("one", np.array(1.0, np.float32)), const("neg", np.array(-10000.0, np.float32)),
              const("axes12", np.array([1, 2], np.int64))]
    # mask [B, S] int64 → additive [B, 1, 1, S]
    nodes += [helper.make_node("Unsqueeze", ["mask", "axes12"], ["m4"]),
              helper.make_node("Cast", ["m4"], ["mf"], to=TensorProto.FLOAT),
              helper.make_node("Sub", ["one", "mf"], ["inv"]),
              helper.make_node("Mul", ["inv", "neg"], ["madd"])]
    for name, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 1, 3]), ("v", [0, 2, 1, 3])):
        lin("x", name, e, e)
        nodes.append(helper.make_node("Reshape", [name, "split_shape"], [name + ".r"]))
        nodes.append(helper.make_node("Transpose", [name + ".r"], [name + ".h"], perm=perm))
    nodes.append(helper.make_node("Transpose", ["k.h"], ["k.t"], perm=[0, 1, 3, 2]))
    nodes.append(helper.make_node("MatMul", ["q.h", "k.t"], ["s"]))
    if div:
        nodes.append(helper.make_node("Div", ["s", "scale"], ["s2"]))
    else:
        inits.append(const("inv_scale", np.array(1 / np.sqrt(head), np.float32)))
        nodes.append(helper.make_node("Mul", ["s", "inv_scale"], ["s2"]))
    nodes += [helper.make_node("Add", ["s2", "madd"], ["s3"]),
              helper.make_node("Softmax", ["s3"], ["p"], axis=-1 if opset >= 13 else 3),
              helper.make_node("MatMul", ["p", "v.h"], ["c"]),
              helper.make_node("Transpose", ["c"], ["c.t"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["c.t", "merge_shape"], ["c.m"])]
    lin("c.m", "o", e, e)
    nodes.append(helper.make_node("Add", ["o", "x"], ["res1"]))
    layer_norm(nodes, inits, "res1", "ln1", e)
    lin("ln1", "ff1", e, 4 * e)
    gelu_erf(nodes, inits, "ff1", "g")
    lin("g", "ff2", 4 * e, e)
    nodes.append(helper.make_node("Add", ["ff2", "ln1"], ["res2"]))
    layer_norm(nodes, inits, "res2", "y", e)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, e]),
              helper.make_tensor_value_info("mask", TensorProto.INT64, [batch, seq])]
    return make(nodes, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, e])], inits, opset)


def layer_norm(nodes, inits, x, y, n):
    axes_attr = {}
    inits += [const(y + ".g", f32(n)), const(y + ".b", f32(n)), const(y + ".two", np.array(2.0, np.float32)),
              const(y + ".eps", np.array(1e-12, np.float32)), const(y + ".axes", np.array([-1], np.int64))]
    nodes += [helper.make_node("ReduceMean", [x], [y + ".mean"], axes=[-1], **axes_attr),
              helper.make_node("Sub", [x, y + ".mean"], [y + ".d"]),
              helper.make_node("Pow", [y + ".d", y + ".two"], [y + ".sq"]),
              helper.make_node("ReduceMean", [y + ".sq"], [y + ".var"], axes=[-1]),
              helper.make_node("Add", [y + ".var", y + ".eps"], [y + ".ve"]),
              helper.make_node("Sqrt", [y + ".ve"], [y + ".std"]),
              helper.make_node("Div", [y + ".d", y + ".std"], [y + ".n"]),
              helper.make_node("Mul", [y + ".n", y + ".g"], [y + ".s"]),
              helper.make_node("Add", [y + ".s", y + ".b"], [y])]


def gelu_erf(nodes, inits, x, y):
    inits += [const(y + ".sqrt2", np.array(1.4142135, np.float32)), const(y + ".one", np.array(1.0, np.float32)),
              const(y + ".half", np.array(0.5, np.float32))]
    nodes += [helper.make_node("Div", [x, y + ".sqrt2"], [y + ".d"]),
              helper.make_node("Erf", [y + ".d"], [y + ".e"]),
              helper.make_node("Add", [y + ".e", y + ".one"], [y + ".a"]),
              helper.make_node("Mul", [x, y + ".a"], [y + ".m"]),
              helper.make_node("Mul", [y + ".m", y + ".half"], [y])]


def bert_feeds(batch=2, seq=8, e=8):
    mask = np.ones((batch, seq), np.int64)
    mask[1, seq - 3:] = 0
    return {"x": f32(batch, seq, e), "mask": mask}


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("div", [True, False])
def test_bert_layer_fuses(opset, div):
    # ReduceMean takes axes as an attribute below opset 18: both opsets here use it.
    ops = assert_same(bert_layer(opset=opset, div=div), bert_feeds())
    assert ops["Attention"] == 1
    assert ops["SkipLayerNorm"] == 2
    assert ops["FusedMatMul"] == 6  # q, k, v, output, ff1 (+GELU), ff2
    for gone in ("Softmax", "Transpose", "Erf", "ReduceMean", "Pow", "Sqrt"):
        assert ops[gone] == 0, gone


@pytest.mark.parametrize("opset", [13, 17])
def test_bert_layer_fuses_with_computed_head_shapes(opset):
    # The batch dim is unnamed ("?") and the split/merge shapes read it from the input: the fusion
    # proves dims B, S are kept by following the projections back to that input.
    ops = assert_same(bert_layer(opset=opset, div=False, computed_shapes=True), bert_feeds())
    assert ops["Attention"] == 1 and ops["Softmax"] == 0 and ops["Transpose"] == 0


def test_level_1_keeps_the_graph_unfused():
    ops = assert_same(bert_layer(), bert_feeds(), level=1)
    assert ops["Attention"] == 0 and ops["FusedMatMul"] == 0 and ops["Softmax"] == 1


def test_conv_bn_relu():
    inits = [const("w", f32(8, 3, 3, 3)), const("b", f32(8)), const("g", f32(8)), const("be", f32(8)),
             const("mu", f32(8)), const("var", np.abs(f32(8)) + 0.5), const("w2", f32(8, 8, 1, 1))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "be", "mu", "var"], ["n"]),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["c2"]),
             helper.make_node("HardSwish", ["c2"], ["y"])]
    m = make(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 10, 10])],
             [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 10, 10])], inits)
    ops = assert_same(m, {"x": f32(2, 3, 10, 10)})
    assert ops["FusedConv"] == 2 and ops["BatchNormalization"] == 0 and ops["Conv"] == 0


def test_gelu_tanh_gpt2_form():
    inits = [const("three", np.array(3.0, np.float32)), const("k", np.array(0.044715, np.float32)),
             const("c", np.array(np.sqrt(2 / np.pi), np.float32)), const("one", np.array(1.0, np.float32)),
             const("half", np.array(0.5, np.float32))]
    nodes = [helper.make_node("Mul", ["half", "x"], ["hx"]),
             helper.make_node("Pow", ["x", "three"], ["x3"]),
             helper.make_node("Mul", ["k", "x3"], ["kx3"]),
             helper.make_node("Add", ["x", "kx3"], ["inner"]),
             helper.make_node("Mul", ["c", "inner"], ["ci"]),
             helper.make_node("Tanh", ["ci"], ["t"]),
             helper.make_node("Add", ["one", "t"], ["a"]),
             helper.make_node("Mul", ["hx", "a"], ["y"])]
    m = make(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], inits)
    ops = assert_same(m, {"x": f32(4, 16) * 3})
    assert ops["Gelu"] == 1 and ops["Tanh"] == 0


@pytest.mark.parametrize("act, graph_output", [("Gelu", False), ("Relu", False), ("Relu", True)])
def test_activation_after_a_reshaped_product_fuses_into_it(act, graph_output):
    """transformers' MLPs: Gemm [B*S, 4H] -> Reshape [B, S, 4H] -> GELU. The activation moves before the
    Reshape and becomes the product's epilogue (kiln.FusedGemm); the outputs stay the same, and a
    Reshape output that is also a graph output keeps the graph unchanged."""
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["p"]),
             helper.make_node("Reshape", ["p", "shape"], ["r"]),
             helper.make_node(act, ["r"], ["y"])]
    inits = [const("w", f32(8, 12)), const("b", f32(12)), const("shape", np.array([2, 3, 12], np.int64))]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 12])]
    if graph_output:
        outs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 3, 12]))
    m = make(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 8])], outs, inits, opset=20)
    ops = assert_same(m, {"x": f32(6, 8)})
    if graph_output:
        assert ops["FusedGemm"] == 0 and ops[act] == 1, ops
    else:
        assert ops["FusedGemm"] == 1 and ops[act] == 0 and ops["Reshape"] == 1, ops


def test_gpt2_default_export_gelu_is_the_first_projections_epilogue():
    """The tiny GPT-2 of transformers' default export: each layer's GELU (tanh form, after the c_fc
    Reshape) ends in the c_fc product's epilogue."""
    path = os.path.join(ROOT, "tests", "models", "attention", "gpt2_default.onnx")
    ops = ops_after(kiln.Engine.build(path, opt_level=2))
    assert ops["Gelu"] == 0 and ops["Tanh"] == 0 and ops["FusedGemm"] >= 2, ops


# ---- torch's nn.MultiheadAttention (ViT), sequence-first, as torch 1.x and 2.x export it
def mha_layer(form: str, seq=6, heads=2, head=4):
    """x [B, S, E] -> the block's Transpose to [S, B, E] -> fused QKV projection -> heads -> attention
    -> out projection -> back to [B, S, E]. form "3d": Q, K, V sliced from the projection, heads
    [B*H, S, D] (torch 1.x); "4d": Q, K, V gathered from it made [3, S, B, E], heads made [B, H, S, D]
    and both scores operands scaled by sqrt(1/sqrt(D)) (torch 2.x). The batch dim is
    symbolic, so the exporter's shape arithmetic (B*H) stays in the graph."""
    E = heads * head
    nodes, inits = [], [const("w_in", f32(E, 3 * E) * 0.3), const("b_in", f32(3 * E) * 0.1),
                        const("w_out", f32(E, E) * 0.3), const("b_out", f32(E) * 0.1),
                        const("i0", np.array(0, np.int64)), const("i1", np.array(1, np.int64)),
                        const("ax0", np.array([0], np.int64)), const("H", np.array(heads, np.int64))]
    n = helper.make_node

    def vec(name, values):
        inits.append(const(name, np.array(values, np.int64)))
        return name

    nodes += [n("Transpose", ["x"], ["xs"], perm=[1, 0, 2]),  # [S, B, E]
              n("Shape", ["xs"], ["shp"]), n("Gather", ["shp", "i0"], ["S_"], axis=0),
              n("Gather", ["shp", "i1"], ["B_"], axis=0), n("Mul", ["B_", "H"], ["BH"]),
              n("Unsqueeze", ["S_", "ax0"], ["S1"]), n("Unsqueeze", ["B_", "ax0"], ["B1"]),
              n("Unsqueeze", ["BH", "ax0"], ["BH1"]),
              n("Concat", ["S1", "BH1", vec("D1", [head])], ["heads_shape"], axis=0),
              n("MatMul", ["xs", "w_in"], ["qkv0"]), n("Add", ["b_in", "qkv0"], ["qkv"])]
    if form == "4d":  # torch 2.x: [S, B, 3, E] -> [3, S, B, E] -> Gather 0, 1, 2
        nodes += [n("Concat", ["S1", "B1", vec("three", [3]), vec("E0", [E])], ["split_shape"], axis=0),
                  n("Reshape", ["qkv", "split_shape"], ["qkv4"]), n("Unsqueeze", ["qkv4", "ax0"], ["qkv5"]),
                  n("Transpose", ["qkv5"], ["qkv5t"], perm=[3, 1, 2, 0, 4]),
                  n("Squeeze", ["qkv5t", vec("ax3", [3])], ["qkv3"])]
    for i, x in enumerate("qkv"):
        if form == "4d":
            nodes.append(n("Gather", ["qkv3", const_name(inits, x + "_idx", np.array(i, np.int64))], [x], axis=0))
        else:
            nodes.append(n("Slice", ["qkv", vec(x + "_st", [i * E]), vec(x + "_en", [(i + 1) * E]), vec(x + "_ax", [-1])], [x]))
        nodes.append(n("Reshape", [x, "heads_shape"], [x + "_r"]))
        nodes.append(n("Transpose", [x + "_r"], [x + "_h"], perm=[1, 2, 0] if (x == "k" and form == "3d") else [1, 0, 2]))
    if form == "3d":
        nodes += [n("Div", ["q_h", const_name(inits, "div8", np.float32(np.sqrt(head)))], ["qd"]),
                  n("MatMul", ["qd", "k_h"], ["sc"]), n("Softmax", ["sc"], ["p"], axis=-1),
                  n("MatMul", ["p", "v_h"], ["ctx"]), n("Transpose", ["ctx"], ["ctx_t"], perm=[1, 0, 2])]
    else:
        nodes.append(n("Concat", ["B1", vec("H1", [heads]), "S1", vec("D4", [head])], ["shape4"], axis=0))
        for x in "qkv":
            nodes.append(n("Reshape", [x + "_h", "shape4"], [x + "_4"]))
        c = const_name(inits, "sqrt_scale", np.float32(np.sqrt(1 / np.sqrt(head))))
        nodes += [n("Transpose", ["k_4"], ["k_4t"], perm=[0, 1, 3, 2]), n("Mul", ["q_4", c], ["qm"]),
                  n("Mul", ["k_4t", c], ["km"]), n("MatMul", ["qm", "km"], ["sc"]), n("Softmax", ["sc"], ["p"], axis=-1),
                  n("MatMul", ["p", "v_4"], ["ctx"]), n("Transpose", ["ctx"], ["ctx_t"], perm=[2, 0, 1, 3])]
    nodes += [n("Mul", ["S_", "B_"], ["SB"]), n("Unsqueeze", ["SB", "ax0"], ["SB1"]),
              n("Concat", ["SB1", vec("E1", [E])], ["merge_shape"], axis=0),
              n("Reshape", ["ctx_t", "merge_shape"], ["merged"]),
              n("Gemm", ["merged", "w_out", "b_out"], ["o"]),
              n("Concat", ["S1", "B1", vec("E2", [E])], ["o_shape"], axis=0), n("Reshape", ["o", "o_shape"], ["o3"]),
              n("Transpose", ["o3"], ["y"], perm=[1, 0, 2])]
    return make(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, E])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)


def const_name(inits, name, value):
    inits.append(const(name, np.asarray(value)))
    return name


@pytest.mark.parametrize("form", ["3d", "4d"])
@pytest.mark.parametrize("batch", [1, 3])
def test_sequence_first_multi_head_attention_fuses(form, batch):
    """torch's nn.MultiheadAttention exports (ViT): kiln.Attention reads the sequence-first
    projections in place (sequence_first = 1), no scores, no head transposes; the result is the
    unfused graph's, at batch 1 and 3 (the strides differ)."""
    ops = assert_same(mha_layer(form), {"x": f32(batch, 6, 8)})
    assert ops["Attention"] == 1 and ops["Softmax"] == 0, dict(ops)


def test_torch2_vit_export_fuses_every_attention(tmp_path):
    """ViT-B/16 as torch 2.11 exports it (bench/zoo/structures/, random weights restored): its 12
    attentions take the shape arithmetic of a dynamic batch (B*H computed by Mul, the key's dims read
    back through Shape) and still fuse; the engine agrees with the unfused one at batch 2."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    model = str(tmp_path / "vit.onnx")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "strip_weights.py"),
                    os.path.join(ROOT, "bench", "zoo", "structures", "vit_b_16_torch211_stripped.onnx"), model, "--restore"],
                   check=True)
    ops = assert_same(model, {"input": f32(2, 3, 224, 224)}, rtol=1e-3, atol=1e-4)
    assert ops["Attention"] == 12 and ops["Softmax"] == 0, dict(ops)


# ---- The zoo: fusions on real exporter output (skipped when the models are not exported)

# Expected rewrites per model at opt level 2, as `kiln inspect` counts them; None: not checked.
ZOO_EXPECT = {
    "bert_base": {"Attention": 12, "SkipLayerNorm": 25, "FusedMatMul": 72, "Softmax": 0},
    "distilbert": {"Attention": 6, "SkipLayerNorm": 13, "FusedMatMul": 36, "Softmax": 0},
    "resnet50": {"BatchNormalization": 0, "FusedConv": 49, "Add": 0, "Relu": 0},  # 16 residual blocks fused
    "mobilenet_v2": {"BatchNormalization": 0, "Add": 0},
    "efficientnet_b0": {"BatchNormalization": 0},
    "vit_b_16": {"Gelu": 0, "Erf": 0, "Attention": 12, "Softmax": 0},
}


def zoo_models():
    if not os.path.isdir(ZOO_DIR):
        return []
    return sorted(f for f in os.listdir(ZOO_DIR) if f.endswith(".onnx"))


def zoo_feeds(path, batch=1):
    m = onnx.load(path, load_external_data=False)
    init = {i.name for i in m.graph.initializer}
    feeds = {}
    for i in m.graph.input:
        if i.name in init:
            continue
        t = i.type.tensor_type
        shape = [d.dim_value if d.dim_value > 0 else batch for d in t.shape.dim]
        if t.elem_type == TensorProto.INT64:
            feeds[i.name] = (np.ones(shape, np.int64) if "mask" in i.name else RNG.integers(0, 1000, shape)).astype(np.int64)
        else:
            feeds[i.name] = RNG.standard_normal(shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("name", zoo_models() or ["(none)"])
def test_zoo_fusions(name, monkeypatch):
    if name == "(none)":
        pytest.skip("no zoo models in " + ZOO_DIR + " (bench/zoo/export.py)")
    path = os.path.join(ZOO_DIR, name)
    # Numerics as CPU engines run (convolutions channels-last), fusions counted channels-first (the
    # channels-last pass makes every convolution a kiln.FusedConv).
    assert_same(path, zoo_feeds(path), rtol=1e-3, atol=1e-3)
    ops = ops_after(kiln.Engine.build(path, opt_level=2, disabled_passes=["channels-last-float-convs"]))
    model = re.sub(r"_op\d+\.onnx$", "", name)
    for op, n in ZOO_EXPECT.get(model, {}).items():
        assert ops[op] == n, (op, dict(ops))


# ---- Conv taps that read only padding
def dilated_conv(dilation, pads, size=(9, 11), kernel=(3, 3), strides=(1, 1), group=1, channels=4):
    """A Conv on a fixed spatial size whose outer taps may land wholly in the padding."""
    w = f32(6, channels // group, *kernel)
    b = f32(6)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", channels, *size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], dilations=list(dilation), pads=list(pads),
                            strides=list(strides), group=group, kernel_shape=list(kernel))
    return make([node], [x], [y], [const("w", w), const("b", b)])


@pytest.mark.parametrize("dilation,pads,size,kernel,strides,group,trimmed", [
    ((36, 36), (36, 36, 36, 36), (9, 11), (3, 3), (1, 1), 1, "[3,3] -> [1,1]"),  # ASPP at dilation 36 on a small map
    ((12, 1), (12, 1, 12, 1), (9, 11), (3, 3), (1, 1), 1, "[3,3] -> [1,3]"),     # one axis only
    ((12, 12), (12, 12, 12, 12), (9, 11), (3, 3), (2, 2), 2, "[3,3] -> [1,1]"),  # strided, grouped
    ((5, 5), (10, 0, 10, 5), (4, 6), (5, 3), (1, 1), 1, "[5,3] -> [1,2]"),       # uneven pads: cut on one side
    ((4, 4), (4, 4, 4, 4), (9, 11), (3, 3), (1, 1), 1, None),                    # every tap reads the input
])
def test_conv_taps_that_read_only_padding_are_cut(tmp_path, dilation, pads, size, kernel, strides, group, trimmed):
    """trim-conv-taps cuts a Conv's kernel to the taps that read the input (the others multiply only
    padding); the outputs equal the unoptimized engine's and ONNX Runtime's."""
    import subprocess  # noqa: PLC0415
    import onnxruntime as ort  # noqa: PLC0415

    m = dilated_conv(dilation, pads, size, kernel, strides, group)
    x = f32(2, 4, *size)
    assert_same(m, {"x": x}, rtol=1e-5, atol=1e-5)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = run(build(m, 2), {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    r = subprocess.run([os.path.join(ROOT, "build", "kiln"), "inspect", str(path), "--verbose"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    if trimmed:
        assert f"[trim-conv-taps] trimmed node 'Conv_0' (Conv): kernel {trimmed}" in r.stdout, r.stdout
    else:
        assert "[trim-conv-taps]" not in r.stdout, r.stdout


@pytest.mark.parametrize("kernel,size,bias,applies", [
    ((4, 4), (16, 12), True, True),     # ViT's patch embedding, scaled down
    ((2, 3), (8, 9), False, True),      # a non-square patch, no bias
    ((4, 4), (18, 16), True, False),    # 18 rows: the kernel does not tile the input
])
def test_patchify_conv_runs_as_a_matrix_product(tmp_path, kernel, size, bias, applies):
    """patchify-conv: a Conv with kernel = stride and no padding becomes Reshape/Transpose/MatMul; the
    outputs equal the unoptimized engine's and ONNX Runtime's."""
    import subprocess  # noqa: PLC0415
    import onnxruntime as ort  # noqa: PLC0415

    w, b = f32(5, 3, *kernel), f32(5)
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, *size])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("Conv", ["x", "w", "b"] if bias else ["x", "w"], ["y"], kernel_shape=list(kernel),
                            strides=list(kernel))
    m = make([node], [x_info], [y_info], [const("w", w)] + ([const("b", b)] if bias else []))
    x = f32(2, 3, *size)
    counts = assert_same(m, {"x": x}, rtol=1e-5, atol=1e-5)
    assert (counts["Conv"] + counts["FusedConv"] == 0) == applies, counts
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(run(build(m, 2), {"x": x})[0], want, rtol=1e-5, atol=1e-5)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    r = subprocess.run([os.path.join(ROOT, "build", "kiln"), "inspect", str(path), "--verbose"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert ("[patchify-conv] ran node 'Conv_0' (Conv)" in r.stdout) == applies, r.stdout


# ---- ReduceMean over the spatial axes is GlobalAveragePool (torch 2.x's squeeze-excitation pooling)


def se_block(opset, axes, keepdims=1, shape=(1, 8, 9, 7)):
    """Conv → ReduceMean(axes) → Mul back onto the conv's output (squeeze-excitation's shape)."""
    c = shape[1]
    inits = [const("w", (RNG.standard_normal((c, c, 3, 3)) * 0.2).astype(np.float32))]
    attrs = {} if keepdims == 1 else {"keepdims": keepdims}
    if opset >= 18:
        inits.append(const("axes", np.array(axes, np.int64)))
        mean = helper.make_node("ReduceMean", ["c", "axes"], ["m"], **attrs)
    else:
        mean = helper.make_node("ReduceMean", ["c"], ["m"], axes=axes, **attrs)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), mean]
    if keepdims == 1:
        nodes.append(helper.make_node("Mul", ["c", "m"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", ["m"], ["y"]))
    return make(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits, opset=opset)


@pytest.mark.parametrize("opset,axes", [(13, [2, 3]), (13, [-1, -2]), (18, [2, 3]), (18, [3, -2])])
def test_spatial_reduce_mean_becomes_a_global_average_pool(opset, axes):
    """ReduceMean over H and W with keepdims (attribute axes before opset 18, a constant input from 18,
    negative axes too) runs as GlobalAveragePool, the unoptimized graph's values."""
    m = se_block(opset, axes)
    ops = assert_same(m, {"x": f32(1, 8, 9, 7)}, rtol=1e-5, atol=1e-5, level=1)
    assert ops["ReduceMean"] == 0 and ops["GlobalAveragePool"] == 1, ops


@pytest.mark.parametrize("opset,axes,keepdims", [(13, [1, 2], 1), (13, [3], 1), (18, [2, 3], 0), (13, [2, 2], 1)])
def test_other_reduce_means_stay(opset, axes, keepdims):
    """Not every spatial axis, a channel axis, a repeated axis, or the dims dropped: a ReduceMean."""
    m = se_block(opset, axes, keepdims)
    try:
        ops = assert_same(m, {"x": f32(1, 8, 9, 7)}, rtol=1e-5, atol=1e-5, level=1)
    except kiln.KilnError:
        assert axes == [2, 2]  # repeated axes are an invalid model; nothing to rewrite either way
        return
    assert ops["ReduceMean"] == 1 and ops["GlobalAveragePool"] == 0, ops


def conv_relu_model():
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
                          "cr", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def test_passes_are_disabled_by_name_and_unknown_names_refused(tmp_path):
    """disabled_passes (kiln build --disable-pass) skips a pipeline pass or a target stage by name, with
    the same result; a name that is neither is an error listing the names (no environment variable
    changes what a build computes)."""
    m = conv_relu_model()
    x = np.random.default_rng(4).standard_normal((1, 3, 8, 8)).astype(np.float32)
    fused = kiln.Engine.build_from_bytes(m, opt_level=2)
    assert "(FusedConv)" in fused.placement_report() and "(Transpose)" in fused.placement_report()
    plain = kiln.Engine.build_from_bytes(m, opt_level=2, disabled_passes=["fuse-activation", "channels-last"])
    assert "(FusedConv)" not in plain.placement_report() and "(Relu)" in plain.placement_report()
    assert "(Transpose)" not in plain.placement_report(), plain.placement_report()
    want = np.maximum(fused.create_context().run({"x": x})[0], 0)
    np.testing.assert_allclose(plain.create_context().run({"x": x})[0], want, rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match=r"unknown pass 'no-such-pass'.*fuse-activation.*channels-last"):
        kiln.Engine.build_from_bytes(m, disabled_passes=["no-such-pass"])
    with pytest.raises(TypeError, match="unknown build option 'disabled_pass'"):  # a misspelt option is not ignored
        kiln.Engine.build_from_bytes(m, disabled_pass=["fuse-activation"])
    path = tmp_path / "cr.onnx"
    path.write_bytes(m)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cli = [os.path.join(repo, "build", "kiln"), "build", str(path), "-o", str(tmp_path / "cr.kiln"), "-q"]
    r = subprocess.run(cli + ["--disable-pass", "fuse-activation"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(cli + ["--disable-pass", "fuse-activatoin"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "unknown pass 'fuse-activatoin'" in r.stdout + r.stderr, r.stdout + r.stderr
    # kiln inspect lists every name --disable-pass takes: the pipeline's passes and the target stages.
    r = subprocess.run([cli[0], "inspect", str(path)], capture_output=True, text=True, timeout=120)
    listed = r.stdout.split("target stages")[1].split("ops after:")[0]
    for stage in ("channels-last", "channels-last-float-convs", "fold-pools-into-convs", "fuse-conv-max-pool",
                  "fuse-qconv-residual", "signed-activations", "quantize-half-directly", "products-write-half",
                  "products-write-float", "fuse-pointwise"):
        assert f"\n  {stage} " in listed, r.stdout
    assert "fuse-activation" in r.stdout.split("target stages")[0], r.stdout
