"""ONNX Runtime custom-op libraries loaded unchanged (#43, step 2): onnxruntime-extensions' ops through
`SessionOptions.register_custom_ops_library`, compared with onnxruntime running the same models with the
same library.

The models are built as onnxruntime-extensions' own tests build them: one node of domain
`ai.onnx.contrib`, opsets '' 17 and 'ai.onnx.contrib' 1. onnxruntime's outputs are computed in a fresh
Python process, so the comparison does not rest on kiln loading its own copy of the library (a library
may keep the first OrtApi table it is given: test_onnxruntime_and_kiln_share_the_library_in_one_process
checks the copy, docs/plugins.md says why).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper

import kiln

ox = pytest.importorskip("onnxruntime_extensions")
LIB = ox.get_library_path()
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILN = os.path.join(REPO, "build", "kiln")
S, F, I, B = TP.STRING, TP.FLOAT, TP.INT64, TP.BOOL


def contrib_model(op, inputs, outputs, extra_nodes=(), node_outputs=None, **attrs):
    """One ai.onnx.contrib node (plus `extra_nodes`); inputs/outputs: (name, elem type, shape) of the graph;
    the node's outputs are the graph's unless `node_outputs` names them."""
    node = helper.make_node(op, [n for n, _, _ in inputs], node_outputs or [n for n, _, _ in outputs], name="n0",
                            domain="ai.onnx.contrib", **attrs)
    graph = helper.make_graph(
        [node, *extra_nodes], "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.contrib", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def words(rng, n, alphabet="abcXYZ éü 019"):
    return np.array(["".join(rng.choice(list(alphabet), size=rng.integers(0, 9))) for _ in range(n)], dtype=object)


def cases():
    rng = np.random.default_rng(43)
    out = {}
    out["StringUpper"] = (contrib_model("StringUpper", [("x", S, [None])], [("y", S, [None])]), {"x": words(rng, 12)})
    out["StringLower"] = (contrib_model("StringLower", [("x", S, [None])], [("y", S, [None])]), {"x": words(rng, 7)})
    out["StringLength"] = (contrib_model("StringLength", [("x", S, [None, None])], [("y", I, [None, None])]),
                           {"x": words(rng, 12).reshape(3, 4)})
    out["StringJoin"] = (contrib_model("StringJoin", [("x", S, [None, None]), ("sep", S, []), ("axis", I, [])], [("y", S, None)]),
                         {"x": words(rng, 6).reshape(2, 3), "sep": np.array("--", dtype=object), "axis": np.array(1, np.int64)})
    out["StringRegexReplace"] = (
        contrib_model("StringRegexReplace", [("x", S, [None]), ("p", S, [1]), ("r", S, [1])], [("y", S, [None])], global_replace=1),
        {"x": words(rng, 10), "p": np.array(["[0-9]+"], dtype=object), "r": np.array(["<n>"], dtype=object)})
    out["StringECMARegexReplace"] = (
        contrib_model("StringECMARegexReplace", [("x", S, [None]), ("p", S, [1]), ("r", S, [1])], [("y", S, [None])],
                      global_replace=1),
        {"x": words(rng, 9), "p": np.array(["[a-c]+"], dtype=object), "r": np.array(["_"], dtype=object)})
    out["StringStrip"] = (contrib_model("StringStrip", [("x", S, [None])], [("y", S, [None])]),
                          {"x": np.array(["  a b ", "\tc\n", "", "d"], dtype=object)})
    out["MaskedFill"] = (contrib_model("MaskedFill", [("x", S, [None]), ("m", B, [None])], [("y", S, [None])]),
                         {"x": words(rng, 6), "m": rng.integers(0, 2, size=6).astype(bool)})
    out["StringToHashBucketFast"] = (
        contrib_model("StringToHashBucketFast", [("x", S, [None]), ("n", I, [1])], [("y", I, [None])]),
        {"x": words(rng, 8), "n": np.array([1000], np.int64)})
    out["BasicTokenizer"] = (
        contrib_model("BasicTokenizer", [("x", S, [None])], [("y", S, [None])], do_lower_case=1, strip_accents=1,
                      tokenize_punctuation=1, remove_control_chars=1, tokenize_chinese_chars=1),
        {"x": np.array(["Hello, World! Ça va? kiln's shim."], dtype=object)})
    out["StringConcat"] = (contrib_model("StringConcat", [("x", S, [None]), ("z", S, [None])], [("y", S, [None])]),
                           {"x": words(rng, 5), "z": words(rng, 5)})
    a = words(rng, 8)
    b = a.copy()
    b[::3] = "other"
    out["StringEqual"] = (contrib_model("StringEqual", [("x", S, [None]), ("z", S, [None])], [("y", B, [None])]), {"x": a, "z": b})
    out["StringSplit"] = (
        contrib_model("StringSplit", [("x", S, [None]), ("sep", S, []), ("skip", B, [])],
                      [("indices", I, None), ("values", S, None), ("shape", I, None)]),
        {"x": np.array(["a b  c", "", "dd e", "f"], dtype=object), "sep": np.array(" ", dtype=object), "skip": np.array(True)})
    out["NegPos"] = (contrib_model("NegPos", [("x", F, [None, None])], [("neg", F, None), ("pos", F, None)]),
                     {"x": rng.standard_normal((5, 7)).astype(np.float32)})
    ids = np.sort(rng.integers(0, 4, size=9)).astype(np.int64)
    ids -= ids[0]
    out["SegmentSum"] = (contrib_model("SegmentSum", [("x", F, [None, None]), ("ids", I, [None])], [("y", F, None)]),
                         {"x": rng.standard_normal((9, 3)).astype(np.float32), "ids": ids})
    m = rng.standard_normal((4, 4)).astype(np.float32) + 4 * np.eye(4, dtype=np.float32)
    out["Inverse"] = (contrib_model("Inverse", [("x", F, [4, 4])], [("y", F, [4, 4])]), {"x": m})
    # An extensions op inside a graph of kiln's own ops: NegPos's two halves added back give x.
    add = helper.make_node("Add", ["neg", "pos"], ["y"], name="add")
    out["NegPos+Add"] = (contrib_model("NegPos", [("x", F, [None])], [("y", F, None)], extra_nodes=[add],
                                       node_outputs=["neg", "pos"]),
                         {"x": rng.standard_normal(11).astype(np.float32)})
    return out


CASES = cases()


def fresh_python(code, cwd):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=str(cwd), capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """onnxruntime's outputs for every case, with the same library, from a process of their own."""
    pytest.importorskip("onnxruntime")
    d = tmp_path_factory.mktemp("ort_refs")
    for name, (model, feeds) in CASES.items():
        onnx.save(model, str(d / f"{name}.onnx"))
        np.savez(d / f"{name}.in.npz", **feeds)
    r = fresh_python(f"""
        import glob, os, numpy as np, onnxruntime as ort
        so = ort.SessionOptions()
        so.register_custom_ops_library({LIB!r})
        for path in sorted(glob.glob("*.onnx")):
            name = path[:-5]
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            feeds = dict(np.load(name + ".in.npz", allow_pickle=True))
            outs = sess.run(None, feeds)
            np.savez(name + ".out.npz", *outs)
        print("DONE")
        """, d)
    assert "DONE" in r.stdout, r.stdout + r.stderr
    return {name: [v for _, v in sorted(np.load(d / f"{name}.out.npz", allow_pickle=True).items(), key=lambda kv: int(kv[0][4:]))]
            for name in CASES}


@pytest.fixture(scope="module")
def session_options():
    so = kiln.SessionOptions()
    so.register_custom_ops_library(LIB)
    return so


def assert_same(got, want, name):
    assert len(got) == len(want), name
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (name, g.shape, w.shape)
        if w.dtype == object:
            assert g.tolist() == w.tolist(), name
        elif w.dtype.kind == "f":
            assert g.dtype == w.dtype, name
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=name)
        else:
            assert g.dtype == w.dtype and np.array_equal(g, w), name


@pytest.mark.parametrize("name", list(CASES))
def test_matches_onnxruntime_with_the_same_library(name, references, session_options):
    model, feeds = CASES[name]
    sess = kiln.InferenceSession(model.SerializeToString(), session_options)
    assert_same(sess.run(None, feeds), references[name], name)


def test_output_shapes_follow_each_run(session_options):
    model, _ = CASES["StringSplit"]
    sess = kiln.InferenceSession(model.SerializeToString(), session_options)
    sep, skip = np.array(" ", dtype=object), np.array(True)
    for text, n in ((["a b c"], 3), (["a", "b c d e"], 5), ([""], 0)):
        indices, values, shape = sess.run(None, {"x": np.array(text, dtype=object), "sep": sep, "skip": skip})
        assert values.shape == (n,) and indices.shape == (n, 2)
        assert values.tolist() == " ".join(text).split()


def test_op_error_names_the_op_and_carries_the_library_message(session_options):
    model, feeds = CASES["SegmentSum"]
    sess = kiln.InferenceSession(model.SerializeToString(), session_options)
    bad = dict(feeds, ids=np.array([0, 0, 2, 1, 1, 1, 1, 1, 1], np.int64))
    with pytest.raises(kiln.KilnError) as e:
        sess.run(None, bad)
    msg = str(e.value)
    assert "ai.onnx.contrib.SegmentSum" in msg and "segment_ids" in msg and os.path.basename(LIB) in msg, msg


def test_onnxruntime_and_kiln_share_the_library_in_one_process(tmp_path):
    """kiln loads its own instance of an ORT library (a private copy): onnxruntime-extensions keeps the table
    of the first runtime that registered it for some ops (StringECMARegexReplace crashed in kiln after
    onnxruntime had registered the same loaded library). Both orders, in processes of their own."""
    pytest.importorskip("onnxruntime")
    model, feeds = CASES["StringECMARegexReplace"]
    onnx.save(model, str(tmp_path / "m.onnx"))
    np.savez(tmp_path / "in.npz", **feeds)
    for order in ("ort,kiln", "kiln,ort"):
        r = fresh_python(f"""
            import numpy as np, onnxruntime as ort, kiln
            feeds = dict(np.load("in.npz", allow_pickle=True))
            def o():
                so = ort.SessionOptions()
                so.register_custom_ops_library({LIB!r})
                return ort.InferenceSession("m.onnx", so, providers=["CPUExecutionProvider"])
            def k():
                so = kiln.SessionOptions()
                so.register_custom_ops_library({LIB!r})
                return kiln.InferenceSession("m.onnx", so)
            sessions = [{{"ort": o, "kiln": k}}[w]() for w in {order.split(",")!r}]
            outs = [s.run(None, feeds)[0].tolist() for s in sessions] + [s.run(None, feeds)[0].tolist() for s in sessions]
            assert all(x == outs[0] for x in outs), outs
            print("SAME")
            """, tmp_path)
        assert r.returncode == 0 and "SAME" in r.stdout, order + ": " + r.stdout + r.stderr


def test_engine_saved_reloads_with_the_library_and_is_refused_without(session_options, references, tmp_path):
    model, feeds = CASES["StringRegexReplace"]
    engine = tmp_path / "m.kiln"
    kiln.InferenceSession(model.SerializeToString(), session_options).engine.save(str(engine))
    np.savez(tmp_path / "in.npz", **feeds)
    np.save(tmp_path / "want.npy", references["StringRegexReplace"][0], allow_pickle=True)
    r = fresh_python(f"""
        import numpy as np, kiln
        feeds = dict(np.load("in.npz", allow_pickle=True))
        try:
            kiln.InferenceSession({str(engine)!r})
        except kiln.KilnError as e:
            print("REFUSED:", e)
        so = kiln.SessionOptions()
        so.register_custom_ops_library({LIB!r})
        (y,) = kiln.InferenceSession({str(engine)!r}, so).run(None, feeds)
        assert y.tolist() == np.load("want.npy", allow_pickle=True).tolist()
        print("MATCH")
        """, tmp_path)
    out = r.stdout + r.stderr
    assert "REFUSED:" in out and "ai.onnx.contrib.StringRegexReplace" in out and os.path.basename(LIB) in out, out
    assert "MATCH" in r.stdout, out


def test_cli_builds_and_runs_an_ort_library_written_against_the_abi(tmp_path):
    """`kiln build/run --plugin` with tests/plugins/ort_test_ops.c, an ORT custom-op library that does not
    depend on Python (onnxruntime-extensions' does, so it loads in Python processes only)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not os.path.exists(KILN):
        pytest.skip("no C compiler or no kiln command")
    lib = str(tmp_path / "libort_test_ops.so")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-fvisibility=hidden", os.path.join(REPO, "tests", "plugins", "ort_test_ops.c"),
                    "-o", lib], check=True, capture_output=True, text=True)
    node = helper.make_node("Scale", ["x"], ["y"], name="n0", domain="kiln_ort_test", alpha=-2.0)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, ["batch", 3])],
                              [helper.make_tensor_value_info("y", F, ["batch", 3])])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("kiln_ort_test", 1)],
                                ir_version=8), str(model))
    engine = tmp_path / "m.kiln"

    def kiln_cmd(*args):
        r = subprocess.run([KILN, *args], capture_output=True, text=True, timeout=120)
        return r.returncode, r.stdout + r.stderr

    code, text = kiln_cmd("build", str(model), "-o", str(engine), "-q", "--plugin", lib)
    assert code == 0, text
    code, text = kiln_cmd("run", str(engine))
    assert code != 0 and "libort_test_ops.so" in text and "kiln_ort_test.Scale" in text and "not loaded" in text, text
    code, text = kiln_cmd("compare", str(model), str(engine), "--plugin", lib)
    assert code == 0 and " OK" in text, text
    # The reference: kiln's engine from Python on the same library.
    x = np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32)
    so = kiln.SessionOptions()
    so.register_custom_ops_library(lib)
    (y,) = kiln.InferenceSession(str(engine), so).run(None, {"x": x})
    np.testing.assert_array_equal(y, -2.0 * x)


def test_loading_again_returns_the_first_load(session_options, tmp_path):
    first = kiln.load_plugin(LIB)
    assert first["version"] == "onnxruntime-custom-ops" and "ai.onnx.contrib.StringUpper" in first["ops"], first
    # Again, and by another spelling of the same file: kiln's private instance is not loaded twice.
    assert kiln.load_plugin(LIB) == first
    assert kiln.load_plugin(os.path.relpath(LIB, os.getcwd())) == first
