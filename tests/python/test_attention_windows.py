"""Swin's shifted-window attention (#40): the scores get the window mask added between two Reshapes,

    Reshape(Add(Reshape(scores + bias, [B/nW, nW, H, N, N]), mask), [B, H, N, N]) → Softmax

(B = images·nW). fuse-attention folds the bias and the mask into one constant [nW, H, N, N] that
kiln.Attention reads at batch entry b % nW (mask_batch_period). The graphs are written here node for
node as timm's block exports them (tests/models/attention/swin_timm.onnx, layers.0/blocks.1/attn:
the shapes computed by Shape/Gather/Unsqueeze/Concat, the scale a Mul on Q, the bias a constant
[1, H, N, N]); each is compared unoptimized, optimized and with onnxruntime, and the fused op count
is checked, as are the forms that must stay unfused."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln
from placement import ops_after

H, D, WIN = 3, 8, 7          # heads, head size, window side
N, C = WIN * WIN, H * D      # tokens per window, channels
NW = 4                       # windows per image


class Graph:
    """A tiny graph builder: const() and node() return value names."""

    def __init__(self):
        self.nodes, self.inits, self.count = [], [], 0

    def name(self, hint):
        self.count += 1
        return f"{hint}_{self.count}"

    def const(self, array, hint="c"):
        n = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(array), n))
        return n

    def node(self, op, inputs, n_out=1, **attrs):
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.name(op), **attrs))
        return outs[0] if n_out == 1 else outs


def dim(g, x, i):
    """Unsqueeze(Gather(Shape(x), i)): dim i of x as a 1-D shape element, as torch exports it."""
    return g.node("Unsqueeze", [g.node("Gather", [g.node("Shape", [x]), g.const(np.int64(i))], axis=0),
                                g.const(np.array([0], np.int64))])


def window_block(g, rng, x, mask, bias=True, packed=True, split_to=None, merge_to=None):
    """One attention block over windows x [B, N, C]; `mask` (a value name) is added to the scores viewed
    [B/nW, nW, H, N, N] (none: a plain window block). Returns the block's output [B, N, C]."""
    w = lambda *s: g.const((rng.standard_normal(s) * 0.15).astype(np.float32), "w")
    i64 = lambda *v: g.const(np.array(v, np.int64))
    n_dim = dim(g, x, 1)
    if packed:  # timm: qkv [B, N, 3C] → [B, N, 3, H, D] → [3, B, H, N, D] → Split, Squeeze
        qkv = g.node("Add", [w(3 * C), g.node("MatMul", [x, w(C, 3 * C)])])
        shape = g.node("Concat", [dim(g, x, 0), n_dim, i64(3), i64(H), i64(-1)], axis=0)
        heads = g.node("Transpose", [g.node("Reshape", [qkv, shape], allowzero=0)], perm=[2, 0, 3, 1, 4])
        parts = g.node("Split", [heads, i64(1, 1, 1)], n_out=3, axis=0)
        q, k, v = (g.node("Squeeze", [p, i64(0)]) for p in parts)
        scores = g.node("MatMul", [g.node("Mul", [q, g.const(np.float32(D ** -0.5))]),
                                   g.node("Transpose", [k], perm=[0, 1, 3, 2])])
    else:  # separate projections, heads Transpose(Reshape(x, [B, N, H, D])) (as transformers' Swin)
        def heads(perm):
            shape = g.node("Concat", [dim(g, x, 0), n_dim, i64(H), i64(D)], axis=0)
            return g.node("Transpose", [g.node("Reshape", [g.node("MatMul", [x, w(C, C)]), shape])], perm=perm)
        q, k, v = heads([0, 2, 1, 3]), heads([0, 2, 3, 1]), heads([0, 2, 1, 3])
        scores = g.node("Div", [g.node("MatMul", [q, k]), g.const(np.float32(D ** 0.5))])
    if bias:  # the relative position bias, a constant [1, H, N, N] once exported
        scores = g.node("Add", [scores, g.const((rng.standard_normal((1, H, N, N)) * 0.5).astype(np.float32), "bias")])
    if mask is not None:
        split = g.node("Concat", [i64(-1), i64(NW), i64(H), n_dim, n_dim], axis=0) if split_to is None else i64(*split_to)
        merge = g.node("Concat", [i64(-1), i64(H), n_dim, n_dim], axis=0) if merge_to is None else i64(*merge_to)
        windows = g.node("Reshape", [scores, split], allowzero=0)
        scores = g.node("Reshape", [g.node("Add", [windows, mask]), merge], allowzero=0)
    ctx = g.node("Transpose", [g.node("MatMul", [g.node("Softmax", [scores], axis=-1), v])], perm=[0, 2, 1, 3])
    merged = g.node("Reshape", [ctx, g.node("Concat", [dim(g, x, 0), n_dim, i64(-1)], axis=0)], allowzero=0)
    return g.node("Add", [w(C), g.node("MatMul", [merged, w(C, C)])])


def swin_mask(rng, shape):
    """A shifted-window mask: 0 within a region, -100 across regions."""
    return np.where(rng.random(shape) < 0.3, -100.0, 0.0).astype(np.float32)


def model(blocks, batch="windows"):
    """blocks: (mask, window_block kwargs) per block, chained; mask "5d" [1, nW, 1, N, N] and "4d"
    [nW, 1, N, N] (constants), ("const", shape), ("input", shape) (a graph input named "mask"), or None
    (a plain window block)."""
    rng = np.random.default_rng(7)
    g = Graph()
    x = "x"
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, N, C])]
    for kind, kwargs in blocks:
        named = {"5d": ("const", (1, NW, 1, N, N)), "4d": ("const", (NW, 1, N, N)), None: (None, None)}
        kind, shape = named[kind] if kind in named else kind
        mask = None
        if kind == "const":
            mask = g.const(swin_mask(rng, shape), "mask")
        elif kind == "input":
            mask = "mask"
            inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, shape))
        x = window_block(g, rng, x, mask, **kwargs)
    out = helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, N, C])
    graph = helper.make_graph(g.nodes, "swin_windows", inputs, [out], g.inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def check(m, feeds):
    """Optimized vs unoptimized vs onnxruntime; returns the optimized engine's op counts."""
    data = m.SerializeToString()
    ref = kiln.Engine.build_from_bytes(data, opt_level=0).create_context().run(feeds)[0]
    engine = kiln.Engine.build_from_bytes(data, opt_level=2)
    got = engine.create_context().run(feeds)[0]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return ops_after(engine)


def feeds(images, rng=None, **extra):
    rng = rng or np.random.default_rng(images)
    return {"x": rng.standard_normal((images * NW, N, C)).astype(np.float32), **extra}


@pytest.mark.parametrize("images", [1, 3])
def test_swin_stage_fuses_every_block(images):
    """A plain window block then shifted-window blocks (the mask 5-D as timm exports it, 4-D, and
    without a bias; packed QKV and separate projections): one kiln.Attention per block, no Softmax."""
    m = model([(None, {}), ("5d", {}), ("4d", {}), ("5d", {"bias": False}), ("5d", {"packed": False}),
               ("4d", {"packed": False, "bias": False})])
    ops = check(m, feeds(images))
    assert ops["Attention"] == 6 and ops["Softmax"] == 0 and ops["Reshape"] == 0, dict(ops)


def test_static_batch_fuses():
    """The same with a static batch of 2 images (the reshapes then name B/nW and B)."""
    m = model([("5d", {"split_to": [2, NW, H, N, N], "merge_to": [2 * NW, H, N, N]})], batch=2 * NW)
    ops = check(m, feeds(2))
    assert ops["Attention"] == 1 and ops["Softmax"] == 0, dict(ops)


def test_forms_that_stay_unfused():
    """A mask given at run time (not a constant); a mask that differs per image ([2, nW, 1, N, N] at a
    static batch of 2 images); a reshape that is not the window split ([B, H, 1, N, N], a mask per head):
    the graph is left as it is, and still right."""
    rng = np.random.default_rng(3)
    m = model([(("input", (1, NW, 1, N, N)), {})])
    ops = check(m, feeds(2, mask=swin_mask(rng, (1, NW, 1, N, N))))
    assert ops["Attention"] == 0 and ops["Softmax"] == 1, dict(ops)
    m = model([(("const", (2, NW, 1, N, N)), {"split_to": [2, NW, H, N, N], "merge_to": [2 * NW, H, N, N]})], batch=2 * NW)
    ops = check(m, feeds(2))
    assert ops["Attention"] == 0 and ops["Softmax"] == 1, dict(ops)
    m = model([(("const", (1, H, 1, N, N)), {"split_to": [-1, H, 1, N, N], "merge_to": [-1, H, N, N]})])
    ops = check(m, feeds(2))
    assert ops["Attention"] == 0 and ops["Softmax"] == 1, dict(ops)
