"""8-bit inference on the CPU: explicitly quantized (QDQ) graphs fold into kiln.QConv / kiln.QMatMul
(passes/fuse_qdq.cpp, backends/cpu/nn_qconv.cpp) and give what the unfused graph gives (opt level 0:
DequantizeLinear, the float op, QuantizeLinear, each run alone) and what ONNX Runtime gives.

Integer outputs may differ by one step where x·s lands within rounding of a half (the float op and
the integer kernel compute the same sum in a different order); everything else must agree."""

from __future__ import annotations


import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln
from onnx.reference import ReferenceEvaluator
from ort_int8 import qdq_reference, u8s8_exact
from placement import ops_after as ops_of

# On every CPU: where oneDNN has VNNI kernels kiln.QConv / kiln.QMatMul run on them, elsewhere on the
# exact kernels (backends/cpu/nn_qconv.cpp); scripts/test.sh runs these tests both ways.

ort = pytest.importorskip("onnxruntime")


def const(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def np_quant(x, scale, zp, dtype):
    info = np.iinfo(dtype)
    return np.clip(np.rint(x / scale) + zp, info.min, info.max).astype(dtype)


def qdq_model(kind, rng, *, xtype=np.uint8, ytype=np.int8, per_channel=True, bias=True, act="Relu",
              quant_out=True, group=1, stride=1, pad=1, trans_b=False):
    """x (float) → Q → DQ → Conv/MatMul/Gemm(DQ(W int8)) [+ bias] → act → Q → DQ → y (float)."""
    nodes, inits = [], []
    tp = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}
    xs, xz = np.float32(rng.uniform(0.01, 0.05)), (xtype(rng.integers(100, 156)) if xtype == np.uint8 else xtype(rng.integers(-20, 20)))
    inits += [const("xs", xs), const("xz", np.array(xz, dtype=xtype))]
    if kind == "conv":
        C, M, k = 8, 16, 3
        xshape = [2, C, 9, 11]
        wshape = [M, C // group, k, k]
        channels, axis = M, 0
    else:
        K, N = 24, 12
        xshape = [3, 5, K] if kind == "matmul" else [6, K]
        wshape = [N, K] if trans_b else [K, N]
        channels, axis = N, (0 if trans_b else 1)
    w = rng.integers(-127, 128, size=wshape).astype(np.int8)
    ws = rng.uniform(0.002, 0.02, size=channels if per_channel else ()).astype(np.float32)
    inits += [const("w", w), const("ws", ws), const("wz", np.zeros(ws.shape, np.int8))]
    nodes += [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
              helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
              helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=axis)]
    ins = ["xd", "wd"]
    if bias:
        inits.append(const("b", rng.standard_normal(channels).astype(np.float32)))
        ins.append("b")
    if kind == "conv":
        nodes.append(helper.make_node("Conv", ins, ["p"], kernel_shape=[3, 3], pads=[pad] * 4, strides=[stride] * 2,
                                      group=group))
    elif kind == "matmul":
        nodes.append(helper.make_node("MatMul", ins[:2], ["p0"]))
        nodes.append(helper.make_node("Add", ["p0", "b"], ["p"]) if bias else helper.make_node("Identity", ["p0"], ["p"]))
    else:
        nodes.append(helper.make_node("Gemm", ins, ["p"], transB=int(trans_b)))
    last = "p"
    if act == "Relu":
        nodes.append(helper.make_node("Relu", ["p"], ["a"]))
        last = "a"
    elif act == "Sigmoid":
        nodes.append(helper.make_node("Sigmoid", ["p"], ["a"]))
        last = "a"
    elif act == "Clip":
        inits += [const("lo", np.float32(-0.5)), const("hi", np.float32(1.5))]
        nodes.append(helper.make_node("Clip", ["p", "lo", "hi"], ["a"]))
        last = "a"
    if quant_out:
        ys = np.float32(0.02 if act == "Sigmoid" else 0.1)
        yz = np.array(3 if ytype == np.int8 else 120, dtype=ytype)
        inits += [const("ys", ys), const("yz", yz)]
        nodes += [helper.make_node("QuantizeLinear", [last, "ys", "yz"], ["yq"]),
                  helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    else:
        nodes.append(helper.make_node("Identity", [last], ["y"]))
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, xshape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = (rng.standard_normal(xshape) * 1.5).astype(np.float32)
    step = float(ys) if quant_out else None
    return m, x, step


def run_kiln(model, x, level):
    e = kiln.Engine.build_from_bytes(model.SerializeToString(), opt_level=level)
    return e, e.create_context().run({"x": x})[0]


def check(model, x, step, fused_op):
    e_fused, got = run_kiln(model, x, 1)
    assert ops_of(e_fused)[fused_op] == 1, e_fused.placement_report()
    _, ref = run_kiln(model, x, 0)
    ort_out = qdq_reference(model.SerializeToString()).run(None, {"x": x})[0]
    assert got.shape == ref.shape == ort_out.shape
    for other in (ref, ort_out):
        if step is None:  # float output: the same real sum
            np.testing.assert_allclose(got, other, rtol=1e-5, atol=1e-4 * float(np.abs(other).max()))
        else:  # 8-bit output: at most one step apart, and rarely
            d = np.abs(got - other) / step
            assert d.max() <= 1.0 + 1e-3, d.max()
            assert np.mean(d > 0.5) < 0.01, np.mean(d > 0.5)


@pytest.mark.parametrize("xtype,ytype", [(np.uint8, np.int8), (np.int8, np.uint8), (np.int8, np.int8)])
@pytest.mark.parametrize("act", ["Relu", "Sigmoid", "Clip", None])
def test_conv_qdq_folds_and_matches(xtype, ytype, act):
    rng = np.random.default_rng(hash((str(xtype), str(ytype), str(act))) % 2**32)
    m, x, step = qdq_model("conv", rng, xtype=xtype, ytype=ytype, act=act)
    check(m, x, step, "QConv")


@pytest.mark.parametrize("group,stride,pad,per_channel,bias", [(2, 2, 0, True, True), (1, 1, 1, False, False),
                                                               (8, 1, 1, True, True)])
def test_conv_geometry_and_scales(group, stride, pad, per_channel, bias):
    rng = np.random.default_rng(7 + group)
    m, x, step = qdq_model("conv", rng, group=group, stride=stride, pad=pad, per_channel=per_channel, bias=bias)
    check(m, x, step, "QConv")


def test_conv_float_output():
    rng = np.random.default_rng(3)
    m, x, step = qdq_model("conv", rng, quant_out=False, act="Relu")
    check(m, x, step, "QConv")


@pytest.mark.parametrize("kind,trans_b", [("matmul", False), ("gemm", False), ("gemm", True)])
@pytest.mark.parametrize("quant_out", [True, False])
def test_matmul_and_gemm_qdq(kind, trans_b, quant_out):
    rng = np.random.default_rng(11 + trans_b + 2 * quant_out)
    m, x, step = qdq_model(kind, rng, trans_b=trans_b, quant_out=quant_out, act=None if kind == "matmul" else "Relu",
                           bias=kind != "matmul")
    check(m, x, step, "QMatMul")


@pytest.mark.parametrize("quant_out", [False, True])
def test_matmul_bias_add_becomes_the_int8_products_bias(quant_out):
    """A MatMul's bias Add after the float-output int8 product becomes its bias (transformers'
    projections: one epilogue instead of a separate add), whether or not a Relu and a QuantizeLinear
    follow (the Add between the MatMul and the Relu keeps fuse-qdq from taking those)."""
    rng = np.random.default_rng(41 + quant_out)
    m, x, step = qdq_model("matmul", rng, quant_out=quant_out, bias=True)
    e, got = run_kiln(m, x, 2)
    counts = ops_of(e)
    assert counts["QMatMul"] == 1 and counts.get("Add", 0) == 0, e.placement_report()
    _, ref = run_kiln(m, x, 0)
    if step is None:
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4 * float(np.abs(ref).max()))
    else:
        assert (np.abs(got - ref) / step).max() <= 1.0 + 1e-3


@pytest.mark.parametrize("quantized", [False, True])
def test_bias_and_gelu_after_an_int8_product_are_its_epilogue(quantized):
    """A transformer's first FFN product: int8 MatMul, bias Add, GELU (erf form, as exporters write it)
    — one kiln.QMatMul with the bias and the GELU, the unfused graph's numbers. With the next product's
    QuantizeLinear after the GELU (an INT8 engine's FFN), the product writes the 8-bit value itself:
    within one step of the unfused graph."""
    rng = np.random.default_rng(43)
    K, N = 32, 24
    w = rng.integers(-127, 128, size=(K, N)).astype(np.int8)
    inits = [const("xs", np.float32(0.03)), const("xz", np.array(0, np.int8)), const("w", w),
             const("ws", rng.uniform(0.002, 0.02, size=N).astype(np.float32)), const("wz", np.zeros(N, np.int8)),
             const("b", rng.standard_normal(N).astype(np.float32)), const("half", np.float32(0.5)),
             const("one", np.float32(1.0)), const("rt2", np.float32(np.sqrt(2.0)))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=1),
             helper.make_node("MatMul", ["xd", "wd"], ["p0"]),
             helper.make_node("Add", ["p0", "b"], ["p"]),
             helper.make_node("Div", ["p", "rt2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]),
             helper.make_node("Mul", ["p", "e1"], ["pe"]),
             helper.make_node("Mul", ["pe", "half"], ["g" if quantized else "y"])]
    ys = np.float32(0.05)
    if quantized:
        inits += [const("ys", ys), const("yz", np.array(10, np.uint8))]
        nodes += [helper.make_node("QuantizeLinear", ["g", "ys", "yz"], ["gq"]),
                  helper.make_node("DequantizeLinear", ["gq", "ys", "yz"], ["y"])]
    g = helper.make_graph(nodes, "ffn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7, K])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = (rng.standard_normal((2, 7, K)) * 1.5).astype(np.float32)
    e, got = run_kiln(m, x, 2)
    counts = ops_of(e)
    # QuantizeLinear, QMatMul (with its 8-bit output, the DequantizeLinear after it)
    assert counts["QMatMul"] == 1 and sum(counts.values()) == 2 + quantized, e.placement_report()
    _, ref = run_kiln(m, x, 0)
    if quantized:
        d = np.abs(got - ref) / ys
        assert d.max() <= 1.0 + 1e-3 and np.mean(d > 0.5) < 0.01, (d.max(), np.mean(d > 0.5))
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_nonzero_weight_zero_point_stays_unfused():
    rng = np.random.default_rng(5)
    m, x, _ = qdq_model("conv", rng)
    for t in m.graph.initializer:
        if t.name == "wz":
            t.CopyFrom(const("wz", np.full(16, 1, np.int8)))
    e, got = run_kiln(m, x, 1)
    assert ops_of(e)["QConv"] == 0
    _, ref = run_kiln(m, x, 0)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


def test_ort_quantize_static_model(tmp_path):
    """A model ONNX Runtime's quantize_static wrote (QDQ, per-channel int8 weights) folds into integer
    kernels and agrees with ONNX Runtime."""
    quant = pytest.importorskip("onnxruntime.quantization")
    rng = np.random.default_rng(0)
    C = [3, 8, 16]
    nodes, inits = [], []
    x = "x"
    for i in range(2):
        inits += [const(f"w{i}", (rng.standard_normal((C[i + 1], C[i], 3, 3)) * 0.3).astype(np.float32)),
                  const(f"b{i}", rng.standard_normal(C[i + 1]).astype(np.float32) * 0.1)]
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        x = f"r{i}"
    nodes += [helper.make_node("GlobalAveragePool", [x], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
              helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]
    inits += [const("fw", rng.standard_normal((10, 16)).astype(np.float32)), const("fb", np.zeros(10, np.float32))]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], initializer=inits)
    fp32 = tmp_path / "fp32.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), fp32)
    feeds = [{"x": rng.random((1, 3, 16, 16), dtype=np.float32)} for _ in range(8)]

    class Reader(quant.CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    qdq = tmp_path / "qdq.onnx"
    quant.quantize_static(str(fp32), str(qdq), Reader(), quant_format=quant.QuantFormat.QDQ, per_channel=True)
    sess = kiln.InferenceSession(str(qdq))
    ref = qdq_reference(qdq.read_bytes())  # ONNX Runtime's float path where its u8 x s8 saturates
    counts = ops_of(sess._engine)
    assert counts["QConv"] == 2 and counts["QMatMul"] == 1, counts
    for f in feeds:
        got, want = sess.run(None, f)[0], ref.run(None, f)[0]
        np.testing.assert_allclose(got, want, atol=0.05 * float(np.abs(want).max()))


# ---- INT8 engines from float models: calibration (builder/calibrate.cpp)

def small_cnn(rng, outlier=False):
    """Conv → Relu → Conv → Relu → Add(residual) → GlobalAveragePool → Flatten → Gemm, float32."""
    C = 8
    inits = [const("w0", (rng.standard_normal((C, 3, 3, 3)) * 0.4).astype(np.float32)),
             const("b0", (rng.standard_normal(C) * 0.1).astype(np.float32)),
             const("w1", (rng.standard_normal((C, C, 3, 3)) * 0.2).astype(np.float32)),
             const("b1", (rng.standard_normal(C) * 0.1).astype(np.float32)),
             const("fw", rng.standard_normal((10, C)).astype(np.float32)),
             const("fb", (rng.standard_normal(10) * 0.1).astype(np.float32))]
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Add", ["r0", "r1"], ["s"]),
             helper.make_node("GlobalAveragePool", ["s"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def images(rng, n, outlier=False):
    x = rng.standard_normal((n, 3, 12, 12)).astype(np.float32)
    if outlier:
        x[0, 0, 0, 0] = 80.0  # one extreme pixel: minmax keeps it, entropy/percentile clip it
    return x


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def build_int8(model, calib, **kw):
    return kiln.Engine.build_from_bytes(model.SerializeToString(), int8=True,
                                        calibration=[{"x": c} for c in calib], **kw)


@pytest.mark.parametrize("method", ["minmax", "entropy", "percentile"])
def test_int8_build_quantizes_every_product_and_stays_close(method):
    rng = np.random.default_rng(21)
    m = small_cnn(rng)
    calib = [images(rng, 4) for _ in range(6)]
    e = build_int8(m, calib, calibration_method=method)
    counts = ops_of(e)
    assert counts["QConv"] == 2 and counts["QMatMul"] == 1 and counts["Conv"] == 0, counts
    meta = e.metadata()
    assert meta["int8.products"] == "3 of 3"
    assert float(meta["int8.rel_l2.y"]) < 0.05
    ref = kiln.Engine.build_from_bytes(m.SerializeToString())
    x = images(rng, 8)
    got = e.create_context().run({"x": x})[0]
    want = ref.create_context().run({"x": x})[0]
    assert rel_l2(got, want) < 0.05, rel_l2(got, want)
    assert rel_l2(got, want) > 0  # it does run in 8 bits


def test_int8_clipping_methods_ignore_an_outlier():
    """With one extreme input pixel, minmax spends the 256 levels on it; entropy and percentile clip
    it, and the bulk of the images comes out closer to float32."""
    rng = np.random.default_rng(4)
    m = small_cnn(rng)
    calib = [images(rng, 4, outlier=(i == 0)) for i in range(6)]
    ref = kiln.Engine.build_from_bytes(m.SerializeToString())
    x = images(rng, 16)
    want = ref.create_context().run({"x": x})[0]
    err = {}
    for method in ("minmax", "entropy", "percentile"):
        e = build_int8(m, calib, calibration_method=method, calibration_percentile=99.9)
        err[method] = rel_l2(e.create_context().run({"x": x})[0], want)
    assert err["entropy"] < err["minmax"] and err["percentile"] < err["minmax"], err


def test_int8_calibration_cache_is_reused_and_checked(tmp_path):
    rng = np.random.default_rng(9)
    m = small_cnn(rng)
    cache = str(tmp_path / "calib.txt")
    calib = [images(rng, 4) for _ in range(4)]
    a = build_int8(m, calib, calibration_cache=cache)
    text = open(cache).read()
    assert text.startswith("kiln-calibration 1 ")
    # No data: the ranges come from the cache, and the engine is the same.
    b = kiln.Engine.build_from_bytes(m.SerializeToString(), int8=True, calibration_cache=cache)
    assert b.metadata()["int8.calibration"] == "cache"
    x = images(rng, 3)
    np.testing.assert_array_equal(a.create_context().run({"x": x})[0], b.create_context().run({"x": x})[0])
    # Another method's cache is not used; with no data that is an error that says what is missing.
    with pytest.raises(kiln.KilnError, match="calibration data"):
        kiln.Engine.build_from_bytes(m.SerializeToString(), int8=True, calibration_cache=cache, calibration_method="entropy")
    # A damaged cache is not trusted either.
    open(cache, "w").write(text.replace("\n", "\nbroken\n", 1))
    with pytest.raises(kiln.KilnError, match="calibration data"):
        kiln.Engine.build_from_bytes(m.SerializeToString(), int8=True, calibration_cache=cache)


def test_int8_errors_are_clear():
    m = small_cnn(np.random.default_rng(1))
    with pytest.raises(kiln.KilnError, match="calibration data"):
        kiln.Engine.build_from_bytes(m.SerializeToString(), int8=True)
    with pytest.raises(kiln.KilnError, match="minmax, entropy or percentile"):
        build_int8(m, [images(np.random.default_rng(0), 2)], calibration_method="kl")
    if not kiln.cuda_available():  # CUDA INT8 engines (kiln.QMatMul on the GPU) need one
        with pytest.raises(kiln.KilnError, match="CUDA|GPU"):
            build_int8(m, [images(np.random.default_rng(0), 2)], device="cuda")


def test_int8_cli_from_a_folder(tmp_path):
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415

    exe = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "build", "kiln")
    rng = np.random.default_rng(2)
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(rng), path)
    calib = tmp_path / "calib"
    calib.mkdir()
    for i in range(4):
        np.save(calib / f"set{i}.npy", images(rng, 2))
    out = tmp_path / "cnn.kiln"
    r = subprocess.run([exe, "build", str(path), "-o", str(out), "--int8", "--calibration", str(calib)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "int8: 3 of 3 products in 8 bits; activation ranges from minmax, 4 input sets" in r.stdout, r.stdout
    assert "QConv" in r.stdout
    # The engine file keeps the quantized plan.
    e = kiln.Engine.load(str(out))
    assert ops_of(e)["QConv"] == 2


@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
def test_quantize_and_dequantize_fast_paths_round_half_to_even_and_saturate(qtype):
    """The per-tensor float32 ↔ 8-bit loops: ties to even, saturation, NaN to the lowest value, as
    the ONNX reference (numpy here, float32 division)."""
    rng = np.random.default_rng(17)
    s = np.float32(0.05)
    zp = qtype(7 if qtype == np.uint8 else -3)
    ties = (np.arange(-300, 300).astype(np.float32) + np.float32(0.5)) * s
    x = np.concatenate([ties, rng.standard_normal(5000).astype(np.float32) * 10,
                        np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 0.0, -0.0], np.float32)])
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [len(x)])],
                          [helper.make_tensor_value_info("q", TensorProto.UINT8 if qtype == np.uint8 else TensorProto.INT8, [len(x)]),
                           helper.make_tensor_value_info("y", TensorProto.FLOAT, [len(x)])],
                          initializer=[const("s", s), const("z", np.array(zp, qtype))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    q, y = kiln.Engine.build_from_bytes(m.SerializeToString(), opt_level=0).create_context().run({"x": x})
    info = np.iinfo(qtype)
    with np.errstate(invalid="ignore"):
        want = np.rint(x / s).astype(np.float64) + int(zp)
    want = np.where(np.isnan(want), info.min, np.clip(want, info.min, info.max)).astype(qtype)
    np.testing.assert_array_equal(q, want)
    np.testing.assert_array_equal(y, (want.astype(np.float32) - np.float32(zp)) * s)


@pytest.mark.parametrize("global_op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_int8_chain_runs_channels_last_with_the_same_bits(monkeypatch, global_op):
    """CPU engines move kiln.QConv chains (and the pools and per-tensor Q/DQ between them) to NHWC:
    the result equals the channels-first engine's bit for bit (the channels-last stage disabled)."""
    rng = np.random.default_rng(31)
    inits = [const("xs", np.float32(0.03)), const("xz", np.array(128, np.uint8)),
             const("w0", rng.integers(-127, 128, (16, 3, 3, 3)).astype(np.int8)),
             const("ws0", rng.uniform(0.002, 0.02, 16).astype(np.float32)), const("b0", rng.standard_normal(16).astype(np.float32)),
             const("s1", np.float32(0.05)), const("z1", np.array(0, np.uint8)),
             const("w1", rng.integers(-127, 128, (8, 16, 1, 1)).astype(np.int8)),
             const("ws1", rng.uniform(0.002, 0.02, 8).astype(np.float32))]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w0", "ws0"], ["w0d"], axis=0),
             helper.make_node("Conv", ["xd", "w0d", "b0"], ["c0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("MaxPool", ["r0"], ["p0"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["p0"], ["p1"], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1]),
             helper.make_node("QuantizeLinear", ["p1", "s1", "z1"], ["q1"]),
             helper.make_node("DequantizeLinear", ["q1", "s1", "z1"], ["d1"]),
             helper.make_node("DequantizeLinear", ["w1", "ws1"], ["w1d"], axis=0),
             helper.make_node("Conv", ["d1", "w1d"], ["c1"], kernel_shape=[1, 1]),
             helper.make_node(global_op, ["c1"], ["y"])]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 15, 13])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = rng.standard_normal((2, 3, 15, 13)).astype(np.float32)
    e, got = run_kiln(m, x, 1)
    counts = ops_of(e)
    assert counts["QConv"] == 2 and counts["ChannelsLastPool"] == 3, counts
    e0 = kiln.Engine.build_from_bytes(m.SerializeToString(), opt_level=1, disabled_passes=["channels-last"])
    want = e0.create_context().run({"x": x})[0]
    assert ops_of(e0)["ChannelsLastPool"] == 0
    np.testing.assert_array_equal(got, want)


def test_int8_accuracy_budget_keeps_the_most_sensitive_products_in_float32():
    rng = np.random.default_rng(8)
    m = small_cnn(rng)
    calib = [images(rng, 4) for _ in range(4)]
    ref = kiln.Engine.build_from_bytes(m.SerializeToString())
    want = [ref.create_context().run({"x": c})[0] for c in calib]

    def measured(e):  # the budget's rel_l2: pooled over the calibration sets
        got = [e.create_context().run({"x": c})[0] for c in calib]
        num = sum(float(np.sum((g.astype(np.float64) - w) ** 2)) for g, w in zip(got, want))
        return (num / sum(float(np.sum(w.astype(np.float64) ** 2)) for w in want)) ** 0.5

    full = measured(build_int8(m, calib))
    assert full > 0
    # A budget below the all-INT8 error: some products go back to float32, and the engine keeps it.
    e = build_int8(m, calib, accuracy_budget=full / 3)
    meta = e.metadata()
    layers = [line.split() for line in meta["int8.layers"].splitlines()]
    assert len(layers) == 3 and {p for _, _, p, _ in layers} == {"int8", "fp32"}, layers
    fp32 = [name for name, _, p, _ in layers if p == "fp32"]
    # The ones kept in float32 are the most sensitive.
    sens = {name: float(s) for name, _, _, s in layers}
    assert min(sens[n] for n in fp32) >= max(s for n, s in sens.items() if n not in fp32)
    assert measured(e) <= full / 3 * (1 + 1e-6), (measured(e), full)
    reported = float(meta["int8.error"].split()[1])
    assert abs(reported - measured(e)) <= 1e-6 + 1e-3 * reported
    counts = ops_of(e)
    assert counts["QConv"] + counts["QMatMul"] == 3 - len(fp32), counts
    # A generous budget changes nothing; top-1 as the metric works the same way.
    assert build_int8(m, calib, accuracy_budget=1.0).metadata()["int8.products"] == "3 of 3"
    t = build_int8(m, calib, accuracy_budget=1e-9, accuracy_metric="top1").metadata()
    assert t["int8.error"].startswith("top1 ")
    with pytest.raises(kiln.KilnError, match="rel_l2 or top1"):
        build_int8(m, calib, accuracy_budget=0.1, accuracy_metric="l1")


def test_ort_quantize_dynamic_model_runs_and_matches(tmp_path):
    """A model ONNX Runtime's quantize_dynamic wrote (DynamicQuantizeLinear + MatMulInteger + scale
    Muls) runs and agrees with ONNX Runtime."""
    quant = pytest.importorskip("onnxruntime.quantization")
    rng = np.random.default_rng(2)
    inits = [const("w1", (rng.standard_normal((32, 64)) * 0.2).astype(np.float32)),
             const("b1", (rng.standard_normal(64) * 0.1).astype(np.float32)),
             const("w2", (rng.standard_normal((64, 16)) * 0.2).astype(np.float32))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"]), helper.make_node("Add", ["h0", "b1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    fp32, dyn = tmp_path / "fp32.onnx", tmp_path / "dyn.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), fp32)
    quant.quantize_dynamic(str(fp32), str(dyn), weight_type=quant.QuantType.QInt8)
    ops = {n.op_type for n in onnx.load(str(dyn)).graph.node}
    assert "MatMulInteger" in ops and "DynamicQuantizeLinear" in ops, ops
    if u8s8_exact():
        ref = ort.InferenceSession(str(dyn), providers=["CPUExecutionProvider"])
    else:  # ONNX Runtime's MatMulInteger saturates here (ort_int8.py): onnx's reference implementation
        ref = ReferenceEvaluator(str(dyn))
    sess = kiln.InferenceSession(str(dyn))
    for n in (1, 3):
        x = rng.standard_normal((n, 8, 32)).astype(np.float32)
        want = ref.run(None, {"x": x})[0]
        got = sess.run(None, {"x": x})[0]
        # The same integer products and scales; only float rounding of the rescale may differ.
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_ort_qoperator_model_runs_on_the_integer_kernels(tmp_path):
    """ONNX Runtime's QOperator format (QLinearConv / QLinearMatMul with constant int8 weights) runs
    as kiln.QConv / kiln.QMatMul, at most one output step from the general QLinear kernels (opt level
    0, which pass onnx's tests) and from ONNX Runtime."""
    quant = pytest.importorskip("onnxruntime.quantization")
    rng = np.random.default_rng(13)
    inits = [const("w0", (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)),
             const("b0", (rng.standard_normal(8) * 0.1).astype(np.float32)),
             const("w1", (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32)),
             const("b1", (rng.standard_normal(16) * 0.1).astype(np.float32)),
             const("fw", (rng.standard_normal((400, 10)) * 0.1).astype(np.float32))]
    # (No pooling: ONNX Runtime writes com.microsoft.QLinearGlobalAveragePool for it, a contrib op.)
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], kernel_shape=[3, 3], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Flatten", ["r1"], ["f"]), helper.make_node("MatMul", ["f", "fw"], ["y"])]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 12, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])], initializer=inits)
    fp32, qop = tmp_path / "fp32.onnx", tmp_path / "qop.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), fp32)
    feeds = [{"x": rng.standard_normal((2, 3, 12, 12)).astype(np.float32)} for _ in range(6)]

    class Reader(quant.CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    quant.quantize_static(str(fp32), str(qop), Reader(), quant_format=quant.QuantFormat.QOperator, per_channel=True,
                          activation_type=quant.QuantType.QUInt8, weight_type=quant.QuantType.QInt8)
    m = onnx.load(str(qop))
    kinds = [n.op_type for n in m.graph.node]
    assert kinds.count("QLinearConv") == 2 and kinds.count("QLinearMatMul") == 1, kinds
    # The output step: the scale of the DequantizeLinear that makes y.
    dq = next(n for n in m.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "y")
    step = float(numpy_helper.to_array(next(t for t in m.graph.initializer if t.name == dq.input[1])))
    fused = kiln.Engine.build(str(qop), opt_level=1)
    counts = ops_of(fused)
    assert counts["QConv"] == 2 and counts["QMatMul"] == 1 and counts["QLinearConv"] == 0, counts
    general = kiln.Engine.build(str(qop), opt_level=0)
    assert ops_of(general)["QLinearConv"] == 2
    ref = ort.InferenceSession(str(qop), providers=["CPUExecutionProvider"])
    for f in feeds:
        got = fused.create_context().run(f)[0]
        # ONNX Runtime's QLinearConv is a reference only where its products are exact (ort_int8.py).
        for other in [general.create_context().run(f)[0]] + ([ref.run(None, f)[0]] if u8s8_exact() else []):
            d = np.abs(got - other) / step
            assert d.max() <= 1.0 + 1e-3, d.max()


def test_int8_engine_with_a_fixed_batch_calibrates_on_smaller_sets():
    # The engine is for batch 16 only (min = opt = max); calibration sets of 4 images still run, and so
    # do the build's own check against float32 (the graph keeps its dynamic batch; the profile shapes
    # the plan). The engine then refuses other batches, as any fixed-profile engine does.
    rng = np.random.default_rng(23)
    m = small_cnn(rng)
    calib = [images(rng, 4) for _ in range(4)]
    fixed = [16, 3, 12, 12]
    e = build_int8(m, calib, profiles=[{"x": (fixed, fixed, fixed)}])
    assert e.metadata()["int8.products"] == "3 of 3"
    assert float(e.metadata()["int8.rel_l2.y"]) < 0.05
    ref = kiln.Engine.build_from_bytes(m.SerializeToString())
    x = images(rng, 16)
    got = e.create_context().run({"x": x})[0]
    want = ref.create_context().run({"x": x})[0]
    assert rel_l2(got, want) < 0.05
    with pytest.raises(kiln.KilnError, match="profile"):
        e.create_context().run({"x": images(rng, 4)})


@pytest.mark.parametrize("which", ["x_zero_point", "w_zero_point"])
def test_qlinearconv_zero_point_of_another_type_is_refused(which):
    """A QLinearConv zero point must have its tensor's type: a uint32 one (found by the exploring model
    fuzzer, where it overflowed the int32 sums) is refused naming the input, at every level."""
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 1, 5, 5])
    zp = {"x_zero_point": np.array(3, np.uint8), "w_zero_point": np.array(1, np.uint8)}
    zp[which] = np.array(4000000000, np.uint32)
    inits = [const("x_scale", np.array(0.1, np.float32)), const("x_zero_point", zp["x_zero_point"]),
             const("w", np.ones((1, 1, 3, 3), np.uint8)), const("w_scale", np.array(0.2, np.float32)),
             const("w_zero_point", zp["w_zero_point"]), const("y_scale", np.array(0.3, np.float32)),
             const("y_zero_point", np.array(2, np.uint8))]
    node = helper.make_node("QLinearConv", ["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point",
                                            "y_scale", "y_zero_point"], ["y"])
    g = helper.make_graph([node], "g", [x], [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    for level in (0, 2):
        with pytest.raises(Exception, match=which + " must have the type of its tensor"):
            run_kiln(m, np.full((1, 1, 5, 5), 7, np.uint8), level)
