"""Clear messages instead of raw failures (issue 50 item 10): a model nesting subgraphs past protobuf's
limit is told so; names that are not UTF-8 never crash the `kiln` command or the Python API (they show
as \\xNN in messages and round-trip through Python as 'surrogateescape' str); and `-o /dev/null`
builds without keeping the engine. The hostile models are generated here."""

from __future__ import annotations

import os
import stat
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import kiln
from test_hostile import KILN, X, kiln as kiln_cli, model, y_out

# ---- (a) subgraphs nested past protobuf's limit


def field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (written by hand: protobuf's Python encoder has a depth limit too)."""
    n, varint = len(payload), b""
    while True:
        byte, n = n & 0x7F, n >> 7
        varint += bytes([byte | (0x80 if n else 0)])
        if not n:
            break
    return bytes([(number << 3) | 2]) + varint + payload


def nested_if_model(levels: int) -> bytes:
    """If nodes nested `levels` deep in then-branches; every else-branch and the innermost body are one Constant."""
    def leaf(out: str) -> bytes:
        const = h.make_node("Constant", [], [out], value=h.make_tensor("v", T.FLOAT, [1], [float(len(out))]))
        return h.make_graph([const], "leaf", [], [h.make_tensor_value_info(out, T.FLOAT, [1])]).SerializeToString()

    body = leaf("y0")
    for k in range(1, levels + 1):
        node = h.make_node("If", ["c"], [f"y{k}"])
        else_attr = h.make_attribute("else_branch", onnx.GraphProto.FromString(leaf(f"y{k - 1}")))
        then_attr = onnx.AttributeProto(name="then_branch", type=onnx.AttributeProto.GRAPH).SerializeToString()
        node_bytes = node.SerializeToString() + field(5, else_attr.SerializeToString()) + field(5, then_attr + field(6, body))
        inputs = [h.make_tensor_value_info("c", T.BOOL, [])] if k == levels else []
        outs = [h.make_tensor_value_info(f"y{k}", T.FLOAT, [1])]
        shell = h.make_graph([], "main" if k == levels else f"g{k}", inputs, outs).SerializeToString()
        body = field(1, node_bytes) + shell
    m = onnx.ModelProto(ir_version=8, opset_import=[h.make_opsetid("", 17)])
    return m.SerializeToString() + field(7, body)


def test_subgraphs_nested_past_protobufs_limit_are_named(tmp_path):
    ok = tmp_path / "ok.onnx"
    ok.write_bytes(nested_if_model(30))
    r = kiln_cli("run", ok, "-i", f"c={_npy(tmp_path, np.array(True))}")
    assert r.returncode == 0, r.stderr
    deep = tmp_path / "deep.onnx"
    deep.write_bytes(nested_if_model(34))
    r = kiln_cli("build", deep, "-o", tmp_path / "deep.kiln")
    assert r.returncode == 1, r.stderr
    assert "past protobuf's limit of 100" in r.stderr and "nested 34 levels deep" in r.stderr, r.stderr
    assert "protobuf parse failed" not in r.stderr
    # The limit is the ecosystem's: onnx.load and onnxruntime refuse the same bytes.
    with pytest.raises(Exception):
        onnx.load_model_from_string(deep.read_bytes())
    with pytest.raises(Exception):
        ort.InferenceSession(deep.read_bytes(), providers=["CPUExecutionProvider"])


def _npy(tmp_path, a):
    p = tmp_path / "c.npy"
    np.save(p, a)
    return p


# ---- (b) names that are not UTF-8


def bad_names_model(tmp_path):
    """Relu from 'in\\xff\\xfe' to 'out\\xfe': written with placeholders of the same length, then patched."""
    p = model(tmp_path, "names.onnx", [h.make_node("Relu", ["inQQ"], ["outQ"], name="nodeQ")],
              [h.make_tensor_value_info("inQQ", T.FLOAT, [2, 3])], [y_out("outQ", [2, 3])])
    data = p.read_bytes().replace(b"inQQ", b"in\xff\xfe").replace(b"outQ", b"out\xfe").replace(b"nodeQ", b"node\xff")
    p.write_bytes(data)
    return p


def test_non_utf8_names_round_trip_through_python(tmp_path):
    p = bad_names_model(tmp_path)
    sess = kiln.InferenceSession(str(p), providers=["CPUExecutionProvider"])
    (i,), (o,) = sess.get_inputs(), sess.get_outputs()
    assert i.name == "in\udcff\udcfe" and o.name == "out\udcfe"  # 'surrogateescape', as os.fsdecode
    assert i.name.encode("utf-8", "surrogateescape") == b"in\xff\xfe"
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    (y,) = sess.run([o.name], {i.name: x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert "in" in repr(i)
    with pytest.raises(kiln.KilnError, match=r"in\\xff\\xfe"):  # messages: \xNN, as the kiln command shows
        sess.run(None, {i.name: np.zeros((3, 3), np.float32)})
    sess.run_with_iobinding(_bound(sess, i.name, o.name, x))


def _bound(sess, iname, oname, x):
    b = sess.io_binding()
    b.bind_cpu_input(iname, x)
    b.bind_output(oname)
    return b


def test_non_utf8_names_in_the_kiln_command(tmp_path):
    p = bad_names_model(tmp_path)
    r = kiln_cli("run", p)
    assert r.returncode == 0, r.stderr
    assert "out\\xfe: float32 [2,3]" in r.stdout, r.stdout
    r = kiln_cli("compare", p, p, "--device-b", "cpu")
    assert r.returncode == 0 and "out\\xfe" in r.stdout, r.stdout + r.stderr
    r = kiln_cli("compare", p, "--against", "onnxruntime")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "'in\\xff\\xfe' is not valid UTF-8" in r.stderr and "json" not in r.stderr, r.stderr
    bad = tmp_path / "x.npy"
    np.save(bad, np.zeros((3, 3), np.float32))
    r = subprocess.run([KILN, "run", str(p), "-i", b"in\xff\xfe=" + str(bad).encode()], capture_output=True, text=True)
    assert r.returncode == 1 and "input 'in\\xff\\xfe'" in r.stderr, r.stderr


# ---- (c) -o /dev/null


def test_engine_written_to_dev_null(tmp_path):
    p = model(tmp_path, "m.onnx", [h.make_node("Relu", ["x"], ["y"])], [X], [y_out()])
    r = kiln_cli("build", p, "-o", os.devnull)
    assert r.returncode == 0, r.stderr
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    kiln.Engine.build(str(p)).save(os.devnull)
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    r = kiln_cli("build", p, "-o", fifo)  # a FIFO would wait for a reader: still refused, before the build
    assert r.returncode == 1 and "FIFO" in r.stderr, r.stderr
