"""CPU fast paths give the general kernels' bits: each case runs once in float32 (the fast path) and
once in float64 (the general N-d kernel, which sums and compares in double as the fast path does),
and the float32 result must equal the float64 one rounded to float32, element for element."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln_isa import onednn_has_avx512


def pool_model(op, dtype, shape, **attrs):
    t = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "pool",
                          [helper.make_tensor_value_info("x", t, shape)], [helper.make_tensor_value_info("y", t, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


def run(model, x):
    return kiln.Engine.build_from_bytes(model.SerializeToString(), opt_level=0).create_context().run({"x": x})[0]


CASES = list(itertools.product(
    ["MaxPool", "AveragePool"],
    [dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
     dict(kernel_shape=[2, 2], strides=[2, 2]),
     dict(kernel_shape=[3, 2], strides=[1, 2], pads=[2, 0, 1, 1], ceil_mode=1),
     dict(kernel_shape=[3, 3], strides=[2, 1], dilations=[2, 2], pads=[1, 2, 2, 1]),
     dict(kernel_shape=[5, 5], strides=[3, 3], pads=[2, 2, 2, 2], count_include_pad=1)]))


@pytest.mark.parametrize("op,attrs", CASES)
def test_2d_pooling_fast_path_matches_the_general_kernel(op, attrs):
    """The 2-D float32 path gives the general N-d kernel's bits (maxima and float sums in window
    order, NaN rules) and the double kernel's values within float32 rounding."""
    if op == "MaxPool":
        attrs = {k: v for k, v in attrs.items() if k != "count_include_pad"}
    elif "dilations" in attrs and op == "AveragePool":
        attrs = dict(attrs)  # AveragePool takes dilations from opset 19
    rng = np.random.default_rng(len(str(attrs)))
    x = rng.standard_normal((2, 3, 13, 11)).astype(np.float32)
    x[0, 0, 0, 0] = np.nan  # a window's first element NaN: the result is NaN in both
    x[1, 2, 5, 5] = np.nan  # later in a window: ignored by max in both
    shape = list(x.shape)
    y32 = run(pool_model(op, np.float32, shape, **attrs), x)
    # The general N-d kernel in float32: the same pool over [N, C, 1, H, W] with a window of 1 on the
    # new axis. Same windows, same order, same float sums: the same bits.
    attrs3 = dict(attrs, kernel_shape=[1] + attrs["kernel_shape"], strides=[1] + attrs["strides"])
    if "pads" in attrs:
        p = attrs["pads"]
        attrs3["pads"] = [0, p[0], p[1], 0, p[2], p[3]]
    if "dilations" in attrs:
        attrs3["dilations"] = [1] + attrs["dilations"]
    y3d = run(pool_model(op, np.float32, [2, 3, 1, 13, 11], **attrs3), x[:, :, None])
    np.testing.assert_array_equal(y32, y3d[:, :, 0])
    # And the double kernel: maxima equal, averages within float32 rounding of a sum (NaN where it is).
    y64 = run(pool_model(op, np.float64, shape, **attrs), x.astype(np.float64))
    if op == "MaxPool":
        np.testing.assert_array_equal(y32, y64.astype(np.float32))
    else:
        np.testing.assert_allclose(y32, y64, rtol=1e-5, atol=1e-6)


def conv_chain_model():
    """Conv (strided) → Relu → depthwise Conv (dilated) → squeeze-excitation (GlobalAveragePool,
    1x1 convs, Sigmoid, Mul) → grouped Conv + residual Add → MaxPool → Conv → output."""
    rng = np.random.default_rng(12)
    C = 16

    def w(*shape, s=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32))

    inits = []
    for name, arr in [("w0", w(C, 3, 3, 3)), ("b0", w(C)), ("wd", w(C, 1, 3, 3)), ("bd", w(C)), ("ws1", w(4, C, 1, 1)),
                      ("bs1", w(4)), ("ws2", w(C, 4, 1, 1)), ("bs2", w(C)), ("wg", w(C, C // 4, 3, 3)), ("bg", w(C)),
                      ("w3", w(8, C, 1, 1)), ("b3", w(8))]:
        arr.name = name
        inits.append(arr)
    n = helper.make_node
    nodes = [n("Conv", ["x", "w0", "b0"], ["c0"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             n("Relu", ["c0"], ["r0"]),
             n("Conv", ["r0", "wd", "bd"], ["cd"], kernel_shape=[3, 3], group=C, dilations=[2, 2], pads=[2, 2, 2, 2]),
             n("Relu", ["cd"], ["rd"]),
             n("GlobalAveragePool", ["rd"], ["g"]),
             n("Conv", ["g", "ws1", "bs1"], ["s1"], kernel_shape=[1, 1]), n("Relu", ["s1"], ["s1r"]),
             n("Conv", ["s1r", "ws2", "bs2"], ["s2"], kernel_shape=[1, 1]), n("Sigmoid", ["s2"], ["s2s"]),
             n("Mul", ["rd", "s2s"], ["se"]),
             n("Conv", ["se", "wg", "bg"], ["cg"], kernel_shape=[3, 3], group=4, pads=[1, 1, 1, 1]),
             n("Add", ["cg", "r0"], ["res"]), n("Relu", ["res"], ["rr"]),
             n("MaxPool", ["rr"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             n("Conv", ["p", "w3", "b3"], ["y"], kernel_shape=[1, 1])]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 20, 18])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_float_convolution_chains_run_channels_last(monkeypatch):
    """CPU engines at opt level 2 run float32 convolutions channels-last (oneDNN's NHWC kernels); the
    chain's pools, squeeze-excitation and residual follow (the squeeze-excitation's global pool computed
    by the convolution before it, as its second output), and the result equals the channels-first
    engine's within float32 rounding."""
    import re  # noqa: PLC0415

    m = conv_chain_model().SerializeToString()
    x = np.random.default_rng(3).standard_normal((2, 3, 20, 18)).astype(np.float32)
    e = kiln.Engine.build_from_bytes(m, opt_level=2)
    report = e.placement_report()
    assert len(re.findall(r"\(ChannelsLastPool\)", report)) == 1, report  # the MaxPool
    assert len(re.findall(r"\(FusedConv\) .*=> float32\[1,10,9,16\], float32\[1,1,1,16\]", report)) == 1, report
    assert len(re.findall(r"\(Transpose\)", report)) == 2, report  # in at the input, out at the output
    got = e.create_context().run({"x": x})[0]
    e0 = kiln.Engine.build_from_bytes(m, opt_level=2, disabled_passes=["channels-last-float-convs"])
    assert "ChannelsLastPool" not in e0.placement_report()
    want = e0.create_context().run({"x": x})[0]
    assert got.shape == want.shape == (2, 8, 5, 4)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def convnext_blocks_model(blocks: int = 3, C: int = 16):
    """ConvNeXt's block, `blocks` times on a residual stream: depthwise 7x7, permute to NHWC,
    LayerNorm, MLP with GELU, permute back, layer scale [C, 1, 1], residual Add."""
    rng = np.random.default_rng(6)
    inits, nodes = [], []
    n = helper.make_node

    def const(name, arr):
        inits.append(numpy_helper.from_array(arr.astype(np.float32), name))
        return name

    x = "x"
    for b in range(blocks):
        p = f"b{b}_"
        nodes += [
            n("Conv", [x, const(p + "wd", rng.standard_normal((C, 1, 7, 7)) * 0.2), const(p + "bd", rng.standard_normal(C))],
              [p + "dw"], kernel_shape=[7, 7], pads=[3, 3, 3, 3], group=C),
            n("Transpose", [p + "dw"], [p + "t0"], perm=[0, 2, 3, 1]),
            n("LayerNormalization", [p + "t0", const(p + "g", 1 + 0.1 * rng.standard_normal(C)),
                                     const(p + "be", 0.1 * rng.standard_normal(C))], [p + "ln"], axis=-1, epsilon=1e-6),
            n("MatMul", [p + "ln", const(p + "w1", rng.standard_normal((C, 4 * C)) * 0.2)], [p + "m1"]),
            n("Add", [p + "m1", const(p + "b1", 0.1 * rng.standard_normal(4 * C))], [p + "a1"]),
            n("Relu", [p + "a1"], [p + "ge"]),
            n("MatMul", [p + "ge", const(p + "w2", rng.standard_normal((4 * C, C)) * 0.2)], [p + "m2"]),
            n("Add", [p + "m2", const(p + "b2", 0.1 * rng.standard_normal(C))], [p + "a2"]),
            n("Transpose", [p + "a2"], [p + "t1"], perm=[0, 3, 1, 2]),
            n("Mul", [p + "t1", const(p + "ls", 0.5 + rng.random((C, 1, 1)))], [p + "sc"]),
            n("Add", [x, p + "sc"], [p + "out"]),
        ]
        x = p + "out"
    nodes.append(n("GlobalAveragePool", [x], ["y"]))
    g = helper.make_graph(nodes, "convnext", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 12, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_convnext_permutes_keep_the_residual_stream_channels_last(monkeypatch):
    """A model's own permutes around its LayerNorm/MLP (ConvNeXt) meet the channels-last chain: the
    permute back to NCHW is read as NHWC, the layer scale [C, 1, 1] and the residual Add follow, and
    the next block's depthwise convolution reads the stream as it is: a Transpose in and one out,
    none per block (there were two per block). The result equals the channels-first engine's."""
    import re  # noqa: PLC0415

    m = convnext_blocks_model().SerializeToString()
    x = np.random.default_rng(2).standard_normal((1, 16, 12, 10)).astype(np.float32)
    e = kiln.Engine.build_from_bytes(m, opt_level=2)
    report = e.placement_report()
    assert len(re.findall(r"\(Transpose\)", report)) == 2, report  # in at the input, out at the output
    got = e.create_context().run({"x": x})[0]
    want = kiln.Engine.build_from_bytes(m, opt_level=0).create_context().run({"x": x})[0]
    assert got.shape == want.shape == (1, 16, 1, 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * float(np.abs(want).max()))


@pytest.mark.parametrize("ta,tb,c_shape,alpha,beta", [(0, 0, None, 1.0, 1.0), (1, 0, (7,), 1.0, 1.0), (0, 1, (1, 7), 1.0, 0.5),
                                                       (1, 1, (), 1.0, 2.0), (0, 0, (5, 7), 1.0, 1.0), (0, 1, (7,), 0.5, 1.0)])
def test_gemm_with_constant_weights_matches_numpy(ta, tb, c_shape, alpha, beta):
    """Gemm with a constant B runs oneDNN's matmul with B packed once (C folded in as its bias row when
    it is one); the other forms keep sgemm. Both give numpy's product."""
    rng = np.random.default_rng(5)
    M, K, N = 5, 33, 7
    a = rng.standard_normal((K, M) if ta else (M, K)).astype(np.float32)
    b = rng.standard_normal((N, K) if tb else (K, N)).astype(np.float32)
    inits = [numpy_helper.from_array(b, "b")]
    ins = ["a", "b"]
    want = alpha * ((a.T if ta else a) @ (b.T if tb else b))
    if c_shape is not None:
        c = rng.standard_normal(c_shape).astype(np.float32)
        inits.append(numpy_helper.from_array(c, "c"))
        ins.append("c")
        want = want + beta * c
    g = helper.make_graph([helper.make_node("Gemm", ins, ["y"], transA=ta, transB=tb, alpha=alpha, beta=beta)], "gemm",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    got = kiln.Engine.build_from_bytes(m.SerializeToString(), opt_level=0).create_context().run({"a": a})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_matmul_with_constant_weights_folds_batches_into_rows():
    rng = np.random.default_rng(6)
    a = rng.standard_normal((2, 3, 40)).astype(np.float32)
    b = rng.standard_normal((40, 24)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "mm",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["B", 3, 40])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    ctx = kiln.Engine.build_from_bytes(m.SerializeToString(), opt_level=0).create_context()
    for batch in (2, 1, 2):  # a new signature re-plans; a seen one reuses its primitive
        x = a[:batch]
        np.testing.assert_allclose(ctx.run({"a": x})[0], x @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["conv", "matmul", "gemm"])
def test_qdq_models_quantize_without_vnni(kind):
    """With oneDNN capped below VNNI (its int8 kernels would saturate int16 pair sums) a QDQ model still
    becomes kiln.QConv / kiln.QMatMul, on the exact kernels, within one step of the unfused graph and of
    ONNX Runtime (test_quantization.check). A child process: oneDNN reads its cap once per process."""
    code = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import numpy as np
import test_quantization as tq
from kiln_isa import onednn_has_vnni, onednn_isa
assert not onednn_has_vnni(), onednn_isa()
m, x, step = tq.qdq_model({kind!r}, np.random.default_rng(2))
tq.check(m, x, step, {"QConv" if kind == "conv" else "QMatMul"!r})
print("ok")
"""
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


def test_int8_engine_files_run_where_onednn_has_no_vnni(tmp_path):
    """An INT8 engine file saved here (oneDNN's VNNI rows where this CPU has them) loads in a process whose
    oneDNN is capped below VNNI: its steps run on the exact rows placement would choose there, with the
    same outputs within one quantization step."""
    import test_quantization as tq  # noqa: PLC0415

    m, x, step = tq.qdq_model("conv", np.random.default_rng(5))
    e = kiln.Engine.build_from_bytes(m.SerializeToString(), opt_level=1)
    assert "(QConv)" in e.placement_report(), e.placement_report()
    path = tmp_path / "qconv.kiln"
    e.save(str(path))
    np.save(tmp_path / "x.npy", x)
    want = e.create_context().run({"x": x})[0]
    code = f"""
import numpy as np, kiln
kiln.set_default_logger_severity(1)
e = kiln.Engine.load({str(path)!r})
np.save({str(tmp_path / "y.npy")!r}, e.create_context().run({{"x": np.load({str(tmp_path / "x.npy")!r})}})[0])
"""
    r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2"),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    if "onednn" in e.placement_report():
        assert "running 'cpu.QConv.i8.exact'" in r.stderr, r.stderr
    got = np.load(tmp_path / "y.npy")
    assert np.abs(got - want).max() <= step * (1 + 1e-3)


FUSED_ACTIVATIONS = [("Relu", {}), ("LeakyRelu", {"alpha": 0.1}), ("Clip", {}), ("Sigmoid", {}),
                     ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("HardSwish", {}), ("Tanh", {}), ("SiLU", {}),
                     ("Gelu", {}), (None, {})]


def fused_conv_model(act, attrs, residual, kind):
    """x → Conv(kind) → (+ residual Add of the first conv's output) → activation, the second conv of
    a two-conv chain (so a channels-last engine keeps it inside the chain)."""
    rng = np.random.default_rng(21)
    C = 16
    k, group = {"dense": (3, 1), "pointwise": (1, 1), "depthwise": (3, C), "grouped": (3, 4), "grouped8": (3, 2)}[kind]
    inits = [numpy_helper.from_array((rng.standard_normal((C, 3, 3, 3)) * 0.3).astype(np.float32), "w0"),
             numpy_helper.from_array((rng.standard_normal((C, C // group, k, k)) * 0.3).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal(C).astype(np.float32), "b1")]
    n = helper.make_node
    nodes = [n("Conv", ["x", "w0"], ["c0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             n("Conv", ["c0", "w1", "b1"], ["c1"], kernel_shape=[k, k], pads=[k // 2] * 4, group=group)]
    out = "c1"
    if residual:
        nodes.append(n("Add", ["c1", "c0"], ["r"]))
        out = "r"
    if act == "Clip":
        inits += [numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
                  numpy_helper.from_array(np.array(0.7, np.float32), "hi")]
        nodes.append(n("Clip", [out, "lo", "hi"], ["y"]))
    elif act == "SiLU":
        nodes += [n("Sigmoid", [out], ["s"]), n("Mul", [out, "s"], ["y"])]
    elif act is not None:
        nodes.append(n(act, [out], ["y"], **attrs))
    else:
        nodes.append(n("Identity", [out], ["y"]))
    g = helper.make_graph(nodes, "fused", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 9, 11])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


@pytest.mark.parametrize("nhwc", ["1", "0"])
@pytest.mark.parametrize("kind", ["dense", "pointwise", "depthwise", "grouped", "grouped8"])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("act,attrs", FUSED_ACTIVATIONS, ids=[a or "none" for a, _ in FUSED_ACTIVATIONS])
def test_fused_convolution_epilogues_match_the_unfused_graph(monkeypatch, act, attrs, residual, kind, nhwc):
    """kiln.FusedConv applies bias, residual and activation as act(conv + B + Z): inside oneDNN's
    primitive (post-ops) where it can, in kiln's epilogue otherwise (HardSigmoid; the residual of a
    blocked-layout primitive), in the packed kernel's tile (dense and grouped channels-last: groups of 4
    and 8 outputs run as blocks of 4 and 2 groups). Either way the result is the unfused graph's (opt
    level 0) within float32 rounding."""
    m = fused_conv_model(act, attrs, residual, kind).SerializeToString()
    x = np.random.default_rng(4).standard_normal((2, 3, 9, 11)).astype(np.float32)
    fused = kiln.Engine.build_from_bytes(m, opt_level=2, disabled_passes=[] if nhwc == "1" else ["channels-last-float-convs"])
    if act is not None or residual:  # a bare Conv stays a Conv
        assert "(FusedConv)" in fused.placement_report()
    got = fused.create_context().run({"x": x})[0]
    want = kiln.Engine.build_from_bytes(m, opt_level=0).create_context().run({"x": x})[0]
    assert got.shape == want.shape == (2, 16, 9, 11)
    # Rounding scales with the sums before the activation (Clip and Tanh bound what comes after it;
    # kiln's packed kernel and the unfused graph's add the taps in different orders).
    pre = kiln.Engine.build_from_bytes(fused_conv_model(None, {}, residual, kind).SerializeToString(),
                                       opt_level=0).create_context().run({"x": x})[0]
    scale = max(float(np.abs(want).max()), float(np.abs(pre).max()))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6 * scale)


@pytest.mark.parametrize("axis,scale_shape,with_bias", [(-1, (24,), True), (-1, (24,), False), (-2, (5, 24), True),
                                                        (1, (5, 24), True), (-2, (1, 24), True)])
def test_float32_layer_norm_rows_match_the_double_kernel(axis, scale_shape, with_bias):
    """float32 LayerNormalization with float32 Scale/B of the normalized dims runs the vectorized row
    (norm_rows.h; a Scale that broadcasts, (1, 24) over (5, 24), takes the general kernel); float64
    runs the general kernel. Y, Mean and InvStdDev agree within float32
    rounding, rows with a large offset included (a one-pass variance would lose them)."""
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((3, 5, 24)) + 1e3 * rng.standard_normal((3, 5, 1))).astype(np.float32)
    scale = rng.standard_normal(scale_shape).astype(np.float32)
    bias = rng.standard_normal(scale_shape).astype(np.float32)

    def run_ln(dtype):
        t = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
        inits = [numpy_helper.from_array(scale.astype(dtype), "s")]
        ins = ["x", "s"]
        if with_bias:
            inits.append(numpy_helper.from_array(bias.astype(dtype), "b"))
            ins.append("b")
        node = helper.make_node("LayerNormalization", ins, ["y", "mean", "inv"], axis=axis, epsilon=1e-3)
        g = helper.make_graph([node], "ln", [helper.make_tensor_value_info("x", t, list(x.shape))],
                              [helper.make_tensor_value_info(o, t, None) for o in ("y", "mean", "inv")], initializer=inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        return kiln.Engine.build_from_bytes(m.SerializeToString(), opt_level=0).create_context().run({"x": x.astype(dtype)})

    y32, mean32, inv32 = run_ln(np.float32)
    y64, mean64, inv64 = run_ln(np.float64)
    np.testing.assert_allclose(y32, y64, rtol=1e-5, atol=1e-5 * float(np.abs(y64).max()))
    np.testing.assert_allclose(mean32, mean64, rtol=1e-6)
    np.testing.assert_allclose(inv32, inv64, rtol=1e-5)


def residual_chain_model(blocks: int, c: int) -> bytes:
    """x -> Relu(Conv1x1) -> `blocks` times h -> Relu(Conv1x1(Relu(Conv1x1(h))) + h) ->
    GlobalAveragePool: each block's residual h is last read by the convolution that adds it (ResNet's
    pointwise + residual layers)."""
    rng = np.random.default_rng(11)
    nodes, inits = [], []

    def conv(src, name):
        w = (rng.standard_normal((c, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
        b = (0.1 * rng.standard_normal(c)).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(b, f"{name}_b")])
        nodes.append(helper.make_node("Conv", [src, f"{name}_w", f"{name}_b"], [name], name=name))
        return name

    def relu(src):
        nodes.append(helper.make_node("Relu", [src], [src + "_relu"], name=src + "_relu"))
        return src + "_relu"

    h = relu(conv("x", "stem"))
    for i in range(blocks):
        inner = relu(conv(h, f"block{i}_a"))
        nodes.append(helper.make_node("Add", [conv(inner, f"block{i}_b"), h], [f"block{i}_sum"], name=f"block{i}_add"))
        h = relu(f"block{i}_sum")
    nodes.append(helper.make_node("GlobalAveragePool", [h], ["y"]))
    g = helper.make_graph(nodes, "residual_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 9, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def runs_with_verbose_log(capfd, model: bytes, opt_level: int, x: np.ndarray, disabled=()) -> tuple[list, str]:
    """Three runs of one context of the model, and what kiln logged (verbose) while building and running."""
    kiln.set_default_logger_severity(0)
    try:
        capfd.readouterr()
        ctx = kiln.Engine.build_from_bytes(model, opt_level=opt_level, disabled_passes=list(disabled)).create_context()
        runs = [ctx.run({"x": x})[0] for _ in range(3)]
        return runs, capfd.readouterr().err
    finally:
        kiln.set_default_logger_severity(2)


def test_pointwise_convolution_adds_its_residual_in_place(capfd):
    """A fused pointwise convolution whose residual dies there (oneDNN's sum post-op) writes its output
    in the residual's own memory: the planner chains the blocks' values into one buffer, so the copy
    of the residual into the output is gone. Runs again and again give the unfused engine's result."""
    m = residual_chain_model(3, 24)
    x = np.random.default_rng(3).standard_normal((1, 24, 9, 7)).astype(np.float32)
    want = kiln.Engine.build_from_bytes(m, opt_level=0).create_context().run({"x": x})[0]
    runs, log = runs_with_verbose_log(capfd, m, 2, x)
    # Distinct: the build plans the opt shapes too (recording the kernels' untuned tactics) and logs the same.
    in_place = set(re.findall(r"memory plan: .* writes '(\S+)' in place of '(\S+)'", log))
    assert len(in_place) == 3, log  # one per block: each block's output takes its residual's buffer
    for got in runs:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def winograd_model(n, c, m, h, w, act, residual):
    """x [n,c,h,w] → Conv 3x3 (c→c, pads 1) → Conv 3x3 (c→m, pads 1, bias) → (+ the first conv's output
    when residual) → act: the second convolution is one oneDNN may run as Winograd."""
    rng = np.random.default_rng(c * 7 + h)
    inits = [numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32), "w0"),
             numpy_helper.from_array((rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal(m).astype(np.float32) * 0.1, "b1")]
    nd = helper.make_node
    nodes = [nd("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]), nd("Conv", ["c0", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1])]
    out = "c1"
    if residual:
        nodes.append(nd("Add", ["c1", "c0"], ["r"]))
        out = "r"
    nodes.append(nd(act, [out], ["y"]))
    g = helper.make_graph(nodes, "wino", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), inits


def conv3x3_reference(x, w, b=None):
    """3x3 convolution, pads 1, in float64."""
    n, c, h, wd = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((n, w.shape[0], h, wd))
    for i in range(3):
        for j in range(3):
            y += np.einsum("nchw,mc->nmhw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j].astype(np.float64))
    return y if b is None else y + b.astype(np.float64)[None, :, None, None]


WINOGRAD_SHAPES = [(1, 48, 48, 28, 28), (2, 48, 56, 19, 21), (1, 64, 64, 29, 31), (5, 128, 96, 13, 13)]
WINOGRAD_EPILOGUES = [("Relu", False), ("Relu", True), ("Sigmoid", True), ("Identity", False)]


# A residual needs as many outputs as inputs: those shapes only.
@pytest.mark.parametrize("nhwc", ["1", "0"])
@pytest.mark.parametrize("shape,act,residual", [(s, a, r) for s in WINOGRAD_SHAPES for a, r in WINOGRAD_EPILOGUES
                                                if not r or s[1] == s[2]])
def test_winograd_convolutions_match_a_double_reference(capfd, monkeypatch, nhwc, shape, act, residual):
    """Untuned, a 3x3 stride-1 convolution with 48 or more channels in and out and 784 output pixels runs
    as oneDNN's Winograd algorithm where oneDNN has it (AVX-512; the verbose log names the kernel),
    channels-last (weights through OIHW into the Winograd layout; the residual and activation in
    kiln's epilogue, after the blocked output's reorder) and channels-first; odd sizes leave partial
    tiles. Its result is the float64 convolution's within the direct kernel's error, and so is the tuned
    engine's, whichever kernel the tuner keeps."""
    disabled = [] if nhwc == "1" else ["channels-last-float-convs"]
    n, c, m, h, w = shape
    model, inits = winograd_model(n, c, m, h, w, act, residual)
    x = np.random.default_rng(h * w).standard_normal((n, c, h, w)).astype(np.float32)
    w0, w1, b1 = (numpy_helper.to_array(t) for t in inits)
    c0 = conv3x3_reference(x, w0)
    pre = conv3x3_reference(c0.astype(np.float32), w1, b1) + (c0 if residual else 0)
    want = {"Relu": np.maximum(pre, 0), "Sigmoid": 1 / (1 + np.exp(-pre)), "Identity": pre}[act]
    runs, log = runs_with_verbose_log(capfd, model.SerializeToString(), 2, x, disabled)
    kernels = re.findall(r"oneDNN convolution (\S+)", log)
    if onednn_has_avx512():
        assert any("wino" in k for k in kernels), log
    else:
        assert not any("wino" in k for k in kernels), log
    scale = float(np.abs(pre).max())
    for got in runs:
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * scale)
    if act == "Relu" and not residual:  # tuned: the tuner's pick among Winograd and the direct kernels
        tuned = kiln.Engine.build_from_bytes(model.SerializeToString(), opt_level=2, tune=True, disabled_passes=disabled)
        np.testing.assert_allclose(tuned.create_context().run({"x": x})[0], want, rtol=0, atol=2e-5 * scale)


def squeeze_excite_model(c, h, w, act, kind):
    """x → Conv 3x3 (3→c) → Conv (dense 3x3 or depthwise, c→c, bias) → act → y; y · Sigmoid(Conv1x1(
    GlobalAveragePool(y))) → out: EfficientNet's squeeze-excitation, whose pool the convolution computes."""
    rng = np.random.default_rng(c + h)
    group = c if kind == "depthwise" else 1
    inits = [numpy_helper.from_array((rng.standard_normal((c, 3, 3, 3)) * 0.3).astype(np.float32), "w0"),
             numpy_helper.from_array((rng.standard_normal((c, c // group, 3, 3)) * 0.3).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b1"),
             numpy_helper.from_array((rng.standard_normal((c, c, 1, 1)) * 0.2).astype(np.float32), "w2")]
    nd = helper.make_node
    nodes = [nd("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             nd("Conv", ["c0", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], group=group)]
    if act == "SiLU":
        nodes += [nd("Sigmoid", ["c1"], ["s1"]), nd("Mul", ["c1", "s1"], ["y"])]
    else:
        nodes.append(nd(act, ["c1"], ["y"]))
    nodes += [nd("GlobalAveragePool", ["y"], ["p"]), nd("Conv", ["p", "w2"], ["q"]), nd("Sigmoid", ["q"], ["g"]),
              nd("Mul", ["y", "g"], ["out"])]
    g = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, h, w])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("p", TensorProto.FLOAT, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


@pytest.mark.parametrize("c,h,w", [(13, 9, 11), (32, 28, 28), (100, 7, 9), (200, 14, 13)])
@pytest.mark.parametrize("act", ["SiLU", "Sigmoid", "Relu", "Identity"])
@pytest.mark.parametrize("kind", ["dense", "depthwise"])
def test_squeeze_excitation_pool_is_computed_by_the_convolution(capfd, c, h, w, act, kind):
    """A channels-last convolution whose output feeds a GlobalAveragePool computes the pool as its second
    output, in the pass that applies its activation (passes/conv_pool.cpp; channels not a multiple of 16,
    more than 128, two images): the log says so, no pool node is left, and the pooled values and the
    block's output are the unfused graph's within float32 rounding (sums in another order)."""
    m = squeeze_excite_model(c, h, w, act, kind)
    x = np.random.default_rng(h * w).standard_normal((2, 3, h, w)).astype(np.float32)
    want = kiln.Engine.build_from_bytes(m, opt_level=0).create_context().run({"x": x})
    kiln.set_default_logger_severity(0)
    try:
        capfd.readouterr()
        e = kiln.Engine.build_from_bytes(m, opt_level=2)
        log = capfd.readouterr().err
    finally:
        kiln.set_default_logger_severity(2)
    assert "[conv-pool]" in log, log
    assert "ChannelsLastPool" not in e.placement_report() and "GlobalAveragePool" not in e.placement_report()
    got = e.create_context().run({"x": x})
    assert got[1].shape == want[1].shape == (2, c, 1, 1)
    # The convolutions add their taps in other orders than the unfused graph's (and the activations are
    # other float32 approximations): rounding scales with the largest outputs, not each element.
    scale = float(np.abs(want[0]).max())
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=2e-6 * scale)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.parametrize("channels", [3, 13, 40, 64, 77, 200])
@pytest.mark.parametrize("op,attrs", [("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
                                      ("MaxPool", dict(kernel_shape=[3, 2], strides=[1, 2], pads=[2, 0, 1, 1], ceil_mode=1)),
                                      ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 1], dilations=[2, 2], pads=[1, 2, 2, 1])),
                                      ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
                                      ("AveragePool", dict(kernel_shape=[5, 5], strides=[3, 3], pads=[2, 2, 2, 2],
                                                           count_include_pad=1)),
                                      ("GlobalAveragePool", {}), ("GlobalMaxPool", {})])
def test_channels_last_pool_matches_the_general_kernel(channels, op, attrs):
    """kiln.ChannelsLastPool's windows (max: channels in register blocks of 32, 8 and 1; average:
    double sums in blocks of 128) give the NCHW kernel's values bit for bit, max's NaN rule included
    (a window's first tap NaN: NaN; a later one: skipped)."""
    rng = np.random.default_rng(channels)
    x = rng.standard_normal((2, channels, 13, 11)).astype(np.float32)
    if op.endswith("MaxPool"):
        x[0, :, 0, 0] = np.nan
        x[1, channels // 2, 5, 5] = np.nan
    want = run(pool_model(op, np.float32, list(x.shape), **attrs), x)
    node = helper.make_node("ChannelsLastPool", ["x"], ["y"], domain="kiln", op=op, **attrs)
    g = helper.make_graph([node], "nhwc_pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("kiln", 1)], ir_version=9)
    got = run(m, np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
    np.testing.assert_array_equal(got, want.transpose(0, 2, 3, 1))


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
@pytest.mark.parametrize("channels", [1, 2, 3, 4, 5])
def test_transpose_of_a_few_channels_to_channels_last(channels, dtype):
    """NCHW -> NHWC of an image with few channels (the input of every CNN engine with channels-last
    convolutions) takes the narrow-transpose path for 2-4 channels: equal to NumPy's transpose."""
    x = (np.random.default_rng(channels).standard_normal((2, channels, 37, 29)) * 50).astype(dtype)
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])
    dt = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info("x", dt, None)], [helper.make_tensor_value_info("y", dt, None)])
    got = run(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), x)
    np.testing.assert_array_equal(got, x.transpose(0, 2, 3, 1))


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float64])
@pytest.mark.parametrize("shape", [(1, 112, 112, 96), (2, 9, 13, 8), (1, 7, 5, 13), (1, 3, 3, 9), (3, 4, 6, 131)])
def test_transpose_of_channels_last_to_channels_first(shape, dtype):
    """NHWC -> NCHW (the output of a channels-last chain, a model's own permutes): 4-byte elements in
    8 x 8 register blocks (channels and pixels not multiples of 8 leave edges), others element by
    element; NaN payloads and every bit kept: equal to NumPy's transpose."""
    x = (np.random.default_rng(shape[3]).standard_normal(shape) * 50).astype(dtype)
    if dtype == np.float32:
        x.reshape(-1)[::7] = np.nan
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[0, 3, 1, 2])
    dt = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info("x", dt, None)], [helper.make_tensor_value_info("y", dt, None)])
    got = run(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), x)
    want = x.transpose(0, 3, 1, 2)
    assert got.shape == want.shape
    assert got.tobytes() == np.ascontiguousarray(want).tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
@pytest.mark.parametrize("groups", [2, 3, 4, 5])
def test_transpose_of_small_blocks_per_pixel(groups, dtype):
    """A channel shuffle in channels-last form, [N, H, W, g, C/g] -> [N, H, W, C/g, g]: many small
    transposes (the batched narrow path for g of 2-4): equal to NumPy's transpose."""
    x = (np.random.default_rng(groups).standard_normal((2, 5, 6, groups, 7)) * 50).astype(dtype)
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[0, 1, 2, 4, 3])
    dt = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info("x", dt, None)], [helper.make_tensor_value_info("y", dt, None)])
    got = run(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), x)
    np.testing.assert_array_equal(got, x.transpose(0, 1, 2, 4, 3))


@pytest.mark.parametrize("channels", [1, 20, 70, 131])
def test_channels_last_global_average_splits_its_pixels_and_keeps_the_bits(channels):
    """A large image's channels-last GlobalAveragePool sums its pixels in chunks of 1024 (split among
    threads; channels in groups of 64 and register blocks of 16, 4 and 1). The NCHW kernel sums in the
    same chunks: bit for bit the same, at 1 and 2 threads, and within float32 rounding of NumPy's mean
    in float64."""
    rng = np.random.default_rng(channels)
    x = (rng.standard_normal((2, channels, 45, 50)) + 3).astype(np.float32)  # 2250 pixels: 3 chunks
    want = run(pool_model("GlobalAveragePool", np.float32, list(x.shape)), x)
    np.testing.assert_allclose(want, x.astype(np.float64).mean(axis=(2, 3), keepdims=True), rtol=1e-6)
    node = helper.make_node("ChannelsLastPool", ["x"], ["y"], domain="kiln", op="GlobalAveragePool")
    g = helper.make_graph([node], "nhwc_pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("kiln", 1)], ir_version=9)
    xt = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    for threads in (1, 2):
        ctx = kiln.Engine.build_from_bytes(m.SerializeToString(), opt_level=0).create_context()
        ctx.set_num_threads(threads)
        np.testing.assert_array_equal(ctx.run({"x": xt})[0], want.transpose(0, 2, 3, 1))


@pytest.mark.parametrize("shape", [(1, 0, 5, 3), (2, 4, 0, 3), (1, 4, 5, 0), (0, 4, 5, 3)])
def test_channels_last_global_average_of_an_empty_image(shape):
    """No pixels (or no channels, or no images): the NCHW kernel's answer (NaN where there is a
    channel and no pixel), no division by zero."""
    x = np.zeros(shape, np.float32)
    want = run(pool_model("GlobalAveragePool", np.float32, [shape[0], shape[3], shape[1], shape[2]]),
               np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
    node = helper.make_node("ChannelsLastPool", ["x"], ["y"], domain="kiln", op="GlobalAveragePool")
    g = helper.make_graph([node], "nhwc_pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("kiln", 1)], ir_version=9)
    got = run(m, x)
    assert got.shape == (shape[0], 1, 1, shape[3])
    np.testing.assert_array_equal(got, want.transpose(0, 2, 3, 1))


def channels_last_engine(nodes, inits, x, out, monkeypatch):
    """Builds the float32 model (input x, output `out`) at opt level 2 (channels-last convolutions) and
    returns its placement report and output, after checking the output against the channels-first
    engine without optimizations."""
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    e = kiln.Engine.build_from_bytes(m, opt_level=2)
    got = e.create_context().run({"x": x})[0]
    want = kiln.Engine.build_from_bytes(m, opt_level=0).create_context().run({"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    return e.placement_report(), got


@pytest.mark.parametrize("axis", [1, -3])
def test_concat_of_channels_last_branches_stays_channels_last(axis, monkeypatch):
    """DeepLabV3's ASPP: convolution branches concatenated on the channel axis, one branch made by an
    op with no channels-last form (Resize). The Concat takes the branches' NHWC forms on axis 3, the
    other branch gets a Transpose, and the convolution after it reads the result as it is: one
    Transpose instead of one per branch plus one after the Concat. Same result as channels-first."""
    rng = np.random.default_rng(4)
    c = 8
    inits, nodes = [], []

    def conv(src, name, cin, cout):
        inits.append(numpy_helper.from_array((rng.standard_normal((cout, cin, 1, 1)) / np.sqrt(cin)).astype(np.float32),
                                             name + "_w"))
        nodes.append(helper.make_node("Conv", [src, name + "_w"], [name], name=name))
        return name

    stem = conv("x", "stem", 3, c)
    branches = [conv(stem, f"b{i}", c, c) for i in range(3)]
    inits.append(numpy_helper.from_array(np.array([1.0, 1.0, 1.0, 1.0], np.float32), "scales"))
    nodes.append(helper.make_node("Resize", [stem, "", "scales"], ["r"], mode="nearest"))
    nodes.append(helper.make_node("Concat", branches + ["r"], ["cat"], axis=axis))
    conv("cat", "head", 4 * c, 5)
    x = rng.standard_normal((1, 3, 9, 11)).astype(np.float32)
    report, got = channels_last_engine(nodes, inits, x, "head", monkeypatch)
    # In at the input, NCHW for the Resize and back for the Concat, out at the output.
    assert len(re.findall(r"\(Transpose\)", report)) == 4, report
    assert re.search(r"\(Concat\).*float32\[1,9,11,32\]", report), report
    assert got.shape == (1, 5, 9, 11)


def test_batch_norm_between_channels_last_ops_stays_channels_last(monkeypatch):
    """DenseNet's dense layer: the features concatenated, then BatchNormalization -> Relu -> Conv. The
    BatchNormalization (constant statistics) becomes a Mul and an Add by per-channel constants on the
    NHWC form, so no Transpose goes to channels-first and back around it; same result as the
    channels-first engine without optimizations."""
    rng = np.random.default_rng(5)
    c = 12
    inits = [numpy_helper.from_array((rng.standard_normal((c, 3, 3, 3)) / 3).astype(np.float32), "w0"),
             numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) / 6).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((7, 2 * c, 1, 1)) / 5).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 2 * c).astype(np.float32), "scale"),
             numpy_helper.from_array(rng.standard_normal(2 * c).astype(np.float32), "bias"),
             numpy_helper.from_array(rng.standard_normal(2 * c).astype(np.float32), "mean"),
             numpy_helper.from_array(rng.uniform(0.2, 2.0, 2 * c).astype(np.float32), "var")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w1"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
             helper.make_node("BatchNormalization", ["cat", "scale", "bias", "mean", "var"], ["bn"], epsilon=1e-3),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"])]
    x = rng.standard_normal((1, 3, 10, 9)).astype(np.float32)
    report, got = channels_last_engine(nodes, inits, x, "y", monkeypatch)
    assert len(re.findall(r"\(Transpose\)", report)) == 2, report  # in at the input, out at the output
    assert "(BatchNormalization)" not in report, report
    assert got.shape == (1, 7, 10, 9)


@pytest.mark.parametrize("k,stride,pad,dil", [(11, 4, 2, 1), (7, 2, 3, 1), (5, 2, 4, 2)])
def test_rgb_stems_match_channels_first(k, stride, pad, dil, monkeypatch):
    """A convolution on 3 channels with a large window (AlexNet's 11x11 stride-4 stem, ResNet's 7x7, a
    dilated 5x5), then a second convolution: where oneDNN would fall back to im2col + GEMM the stem
    runs in kiln's packed kernel by patches (the window's taps copied into rows), elsewhere in
    oneDNN's direct kernel. Either way the channels-first engine's result within float32 rounding."""
    rng = np.random.default_rng(k)
    inits = [numpy_helper.from_array((rng.standard_normal((20, 3, k, k)) / k).astype(np.float32), "w0"),
             numpy_helper.from_array(rng.standard_normal(20).astype(np.float32), "b0"),
             numpy_helper.from_array((rng.standard_normal((8, 20, 3, 3)) / 6).astype(np.float32), "w1")]
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["s"], kernel_shape=[k, k], strides=[stride, stride],
                              pads=[pad] * 4, dilations=[dil, dil]),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Conv", ["r", "w1"], ["y"], pads=[1, 1, 1, 1])]
    x = rng.standard_normal((1, 3, 45, 39)).astype(np.float32)
    report, got = channels_last_engine(nodes, inits, x, "y", monkeypatch)
    assert len(re.findall(r"\(FusedConv\)", report)) == 2, report


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1, 0], [7, 5], [2, 1], [2, 1]),          # rows by 2 and the first channels
    ([-1], [-100], [3], [-1]),                 # the width reversed
    ([0, 2, 1], [1, 9, 8], None, None),        # no axes: the leading three (N, C, H)
    ([6, 1], [0, 6], [-2, -1], [-2, 2]),       # negative axes, a negative step
])
def test_slices_of_channels_last_values(starts, ends, axes, steps, monkeypatch):
    """Slice with constant bounds of a value with an NHWC form slices that form on the matching axes
    (axes given, negative or left out; steps of either sign), then a convolution reads it: the
    channels-first result."""
    rng = np.random.default_rng(len(starts))
    inits = [numpy_helper.from_array((rng.standard_normal((10, 3, 3, 3)) / 3).astype(np.float32), "w0"),
             numpy_helper.from_array(np.array(starts, np.int64), "starts"),
             numpy_helper.from_array(np.array(ends, np.int64), "ends")]
    ins = ["c0", "starts", "ends"]
    if axes is not None:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        ins.append("axes")
    if steps is not None:
        inits.append(numpy_helper.from_array(np.array(steps, np.int64), "steps"))
        ins.append("steps")
    x = rng.standard_normal((1, 3, 11, 9)).astype(np.float32)
    # The sliced shape (NumPy's slicing of the first convolution's output), for the next one's weights.
    y = np.zeros((1, 10, 11, 9), np.float32)
    sl = [slice(None)] * 4
    for i, (b, e) in enumerate(zip(starts, ends)):
        a = axes[i] if axes is not None else i
        sl[a] = slice(b, e if e > -100 else None, steps[i] if steps is not None else 1)
    c = y[tuple(sl)].shape[1]
    inits.append(numpy_helper.from_array((rng.standard_normal((4, c, 1, 1)) / 2).astype(np.float32), "w1"))
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Slice", ins, ["s"]),
             helper.make_node("Conv", ["s", "w1"], ["y"])]
    report, got = channels_last_engine(nodes, inits, x, "y", monkeypatch)
    assert len(re.findall(r"\(Transpose\)", report)) == 2, report  # in at the input, out at the output


@pytest.mark.parametrize("split", ["Slice", "Split"])
@pytest.mark.parametrize("groups", [2, 3])
def test_channel_shuffle_and_split_stay_channels_last(split, groups, monkeypatch):
    """ShuffleNet's unit: branches concatenated, the channels shuffled (Reshape to [N, g, C/g, H, W],
    Transpose [0, 2, 1, 3, 4], Reshape back), the result split in two on the channel axis (Slice with
    constant bounds, or Split), one half convolved, both concatenated again. Each op runs on the NHWC
    forms (the shuffle as one small transpose per pixel), so the only Transposes are the model's own
    shuffles and those at the input and output; same result as channels-first."""
    rng = np.random.default_rng(6)
    c = 6 * groups  # channels after the first Concat: two branches of 3 * groups
    h, w = 7, 9
    inits = [numpy_helper.from_array((rng.standard_normal((c // 2, 3, 3, 3)) / 3).astype(np.float32), "w0"),
             numpy_helper.from_array((rng.standard_normal((c // 2, 3, 1, 1)) / 2).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((c // 2, c // 2, 1, 1)) / 3).astype(np.float32), "w2"),
             numpy_helper.from_array((rng.standard_normal((5, c, 1, 1)) / 3).astype(np.float32), "w3"),
             numpy_helper.from_array(np.array([1, groups, c // groups, h, w], np.int64), "shape5"),
             numpy_helper.from_array(np.array([1, c, h, w], np.int64), "shape4")]
    n = helper.make_node
    nodes = [n("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]), n("Conv", ["x", "w1"], ["b"]),
             n("Concat", ["a", "b"], ["cat"], axis=1),
             n("Reshape", ["cat", "shape5"], ["r5"]), n("Transpose", ["r5"], ["t5"], perm=[0, 2, 1, 3, 4]),
             n("Reshape", ["t5", "shape4"], ["shuffled"])]
    if split == "Slice":
        inits += [numpy_helper.from_array(np.array([0], np.int64), "s0"),
                  numpy_helper.from_array(np.array([c // 2], np.int64), "half"),
                  numpy_helper.from_array(np.array([c], np.int64), "end"),
                  numpy_helper.from_array(np.array([-3], np.int64), "axes")]
        nodes += [n("Slice", ["shuffled", "s0", "half", "axes"], ["lo"]),
                  n("Slice", ["shuffled", "half", "end", "axes"], ["hi"])]
    else:
        inits.append(numpy_helper.from_array(np.array([c // 2, c // 2], np.int64), "sizes"))
        nodes.append(n("Split", ["shuffled", "sizes"], ["lo", "hi"], axis=1))
    nodes += [n("Conv", ["hi", "w2"], ["hc"]), n("Relu", ["hc"], ["hr"]), n("Concat", ["lo", "hr"], ["cat2"], axis=1),
              n("Conv", ["cat2", "w3"], ["y"])]
    x = rng.standard_normal((1, 3, h, w)).astype(np.float32)
    report, got = channels_last_engine(nodes, inits, x, "y", monkeypatch)
    # In at the input, out at the output, and the shuffle's own (now a per-pixel [g, C/g] transpose).
    assert len(re.findall(r"\(Transpose\)", report)) == 3, report
    assert re.search(rf"\(Transpose\).*float32\[1,{h},{w},{c // groups},{groups}\]", report), report
    assert got.shape == (1, 5, h, w)


def test_reshapes_are_views_where_their_input_dies(capfd):
    """Reshape/Flatten/Squeeze/Unsqueeze planned ahead ask for their input's memory: where the input
    has no later reader the planner grants it and nothing is copied; where it is read again (here by
    the final Add) it is not, and that reader still sees the original values."""
    n = helper.make_node
    nodes = [n("Relu", ["x"], ["a"]), n("Reshape", ["a", "s1"], ["r1"]), n("Neg", ["r1"], ["b"]),
             n("Unsqueeze", ["b", "ax"], ["u"]), n("Squeeze", ["u", "ax"], ["q"]), n("Flatten", ["q"], ["f"], axis=1),
             n("Reshape", ["f", "s2"], ["r2"]), n("Relu", ["r2"], ["c"]),
             n("Reshape", ["c", "s3"], ["r3"]), n("Add", ["r3", "c"], ["y"])]
    inits = [numpy_helper.from_array(np.array([6, 20], np.int64), "s1"), numpy_helper.from_array(np.array([0], np.int64), "ax"),
             numpy_helper.from_array(np.array([4, 30], np.int64), "s2"), numpy_helper.from_array(np.array([4, 30], np.int64), "s3")]
    g = helper.make_graph(nodes, "views", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    x = np.random.default_rng(8).standard_normal((2, 3, 4, 5)).astype(np.float32)
    c = np.maximum(-np.maximum(x, 0).reshape(4, 30), 0)
    runs, log = runs_with_verbose_log(capfd, m, 0, x)
    granted = dict((y, a) for y, a in re.findall(r"memory plan: .* writes '(\S+)' in place of '(\S+)'", log))
    assert granted == {"r1": "a", "u": "b", "q": "u", "f": "q", "r2": "f"}, log  # not r3: c is read again
    for got in runs:
        np.testing.assert_array_equal(got, c + c)


def _nms_reference(boxes, scores, max_out, iou_thr, score_thr, center):
    """NonMaxSuppression by its definition, in double: every candidate (score order, stable) against
    every box kept so far."""
    def corners(b):
        if center:
            return (b[1] - b[3] / 2, b[0] - b[2] / 2, b[1] + b[3] / 2, b[0] + b[2] / 2)
        return (min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3]))

    def above(a, b):
        aa, ab = (a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1])
        if not (aa > 0 and ab > 0):
            return False
        ih, iw = min(a[2], b[2]) - max(a[0], b[0]), min(a[3], b[3]) - max(a[1], b[1])
        if not (ih > 0 and iw > 0):
            return False
        inter = ih * iw
        return inter / (aa + ab - inter) > iou_thr

    out = []
    for b in range(boxes.shape[0]):
        bx = [corners([float(v) for v in boxes[b, i]]) for i in range(boxes.shape[1])]
        for c in range(scores.shape[1]):
            sc = scores[b, c].astype(np.float64)
            cand = sorted((i for i in range(len(bx)) if sc[i] > score_thr), key=lambda i: -sc[i])
            kept = []
            for i in cand:
                if len(kept) >= max_out:
                    break
                if any(above(bx[i], bx[j]) for j in kept):
                    continue
                kept.append(i)
                out.append((b, c, i))
    return np.array(out, np.int64).reshape(-1, 3)


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("offset_classes", [False, True])
def test_non_max_suppression_matches_its_definition(center, offset_classes):
    """kiln's NonMaxSuppression indexes the kept boxes by x (a box is only tried against kept boxes in
    the buckets it touches, wide ones against all); the selection is the definition's: every candidate
    against every kept box. Boxes clustered and spread, torchvision-style class offsets, very wide
    boxes, and boxes that can take no part (NaN, infinite, inverted, empty)."""
    rng = np.random.default_rng(7 + center + 2 * offset_classes)
    n, classes = 700, 3
    xy = rng.uniform(0, 100, (1, n, 2))
    wh = rng.uniform(1, 30, (1, n, 2))
    wh[0, :20] *= 40  # wide boxes
    if offset_classes:  # batched NMS: each third of the boxes moved far apart
        xy[0, n // 3: 2 * n // 3] += 1000
        xy[0, 2 * n // 3:] += 2000
    if center:
        boxes = np.concatenate([xy + wh / 2, wh], axis=2)[:, :, [0, 1, 2, 3]]
    else:
        boxes = np.concatenate([xy, xy + wh], axis=2)
    boxes = boxes.astype(np.float32)
    boxes[0, 30] = np.nan
    boxes[0, 31, 0] = -np.inf
    boxes[0, 32, 2] = boxes[0, 32, 0]  # no width
    if center:
        boxes[0, 33, 2] = -5  # negative width
    scores = rng.uniform(0, 1, (1, classes, n)).astype(np.float32)
    scores[0, :, 30:34] = 0.99
    for max_out, iou_thr, score_thr in [(50, 0.5, 0.1), (1000, 0.3, 0.0), (1000, 0.0, 0.5)]:
        nodes = [helper.make_node("NonMaxSuppression", ["b", "s", "m", "i", "t"], ["y"], center_point_box=center)]
        inits = [numpy_helper.from_array(np.array([max_out], np.int64), "m"),
                 numpy_helper.from_array(np.array([iou_thr], np.float32), "i"),
                 numpy_helper.from_array(np.array([score_thr], np.float32), "t")]
        g = helper.make_graph(nodes, "nms", [helper.make_tensor_value_info("b", TensorProto.FLOAT, list(boxes.shape)),
                                             helper.make_tensor_value_info("s", TensorProto.FLOAT, list(scores.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, None)], initializer=inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        got = kiln.Engine.build_from_bytes(m.SerializeToString()).create_context().run({"b": boxes, "s": scores})[0]
        want = _nms_reference(boxes, scores, max_out, float(np.float32(iou_thr)), float(np.float32(score_thr)), center)
        np.testing.assert_array_equal(got, want)


def test_vectorizable_math_is_inlined_everywhere():
    """exp/sigmoid/tanh/erf (elementwise_math.h), the unary kernels' wrappers and the fused epilogues'
    activate<> vectorize only when inlined into their loops. When GCC left one out of line, the loops
    called it per element: GELU ran 20x slower (a 3136 x 384 MatMul's epilogue 14 ms instead of 1; a
    standalone Gelu 7.8 ms instead of 0.4). No out-of-line copy may exist in the built library (the
    build tree's, which keeps its local symbols; the installed one is stripped)."""
    import os
    import shutil
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    lib = os.path.join(root, "build", "libkiln.so")
    nm = shutil.which("nm")
    if not os.path.exists(lib) or not nm:
        pytest.skip("no build/libkiln.so or no nm")
    syms = subprocess.run([nm, "-C", lib], capture_output=True, text=True, check=True).stdout
    if " t " not in syms:
        pytest.skip("build/libkiln.so has no local symbols (stripped)")
    pattern = re.compile(r"math::(exp|sigmoid|tanh|erf)_f32|\b(tanh_|erf_|sigmoid)<float>|fused::activate<")
    leaked = [line for line in syms.splitlines() if pattern.search(line)]
    assert not leaked, "\n".join(leaked[:10])
