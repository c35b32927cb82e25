#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora (committed): small ONNX models covering the importer's features
(initializers, attributes of each kind, subgraphs, functions, sequences, fused patterns), the engine
files kiln builds from them (without the checksum trailer, which fuzz_engine adds), .npy files, and
fuzz_serve's requests and model configurations (its input layout: tests/fuzz/fuzz_serve.cpp).

    .venv/bin/python tests/fuzz/make_seeds.py           # needs build/kiln
    .venv/bin/python tests/fuzz/make_seeds.py serve     # fuzz_serve's alone (needs tritonclient)
"""

import json
import os
import struct
import sys
import subprocess
import tempfile

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

HERE = os.path.dirname(os.path.abspath(__file__))
KILN = os.path.join(HERE, "..", "..", "build", "kiln")


def vi(name, dtype=T.FLOAT, shape=(2, 3)):
    return h.make_tensor_value_info(name, dtype, list(shape) if shape is not None else None)


def const(name, arr):
    return onnx.numpy_helper.from_array(np.asarray(arr), name)


def models():
    rng = np.random.default_rng(0)
    yield "add_relu", h.make_graph(
        [h.make_node("Add", ["x", "w"], ["a"]), h.make_node("Relu", ["a"], ["y"])], "g", [vi("x")], [vi("y")],
        [const("w", rng.standard_normal((2, 3)).astype(np.float32))])
    yield "conv_bn_pool", h.make_graph(
        [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1]),
         h.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"]),
         h.make_node("Relu", ["n"], ["r"]), h.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
         h.make_node("GlobalAveragePool", ["p"], ["g"]), h.make_node("Flatten", ["g"], ["f"]),
         h.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)],
        "g", [vi("x", shape=(1, 2, 6, 6))], [vi("y", shape=(1, 3))],
        [const("w", rng.standard_normal((4, 2, 3, 3)).astype(np.float32)), const("b", np.zeros(4, np.float32)),
         const("s", np.ones(4, np.float32)), const("bb", np.zeros(4, np.float32)), const("m", np.zeros(4, np.float32)),
         const("v", np.ones(4, np.float32)), const("fw", rng.standard_normal((3, 4)).astype(np.float32)),
         const("fb", np.zeros(3, np.float32))])
    yield "shape_ops", h.make_graph(
        [h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "i"], ["d"], axis=0),
         h.make_node("Unsqueeze", ["d", "ax"], ["u"]), h.make_node("Concat", ["u", "k"], ["t"], axis=0),
         h.make_node("Reshape", ["x", "t"], ["r"]), h.make_node("Transpose", ["r"], ["tr"], perm=[1, 0]),
         h.make_node("Slice", ["tr", "st", "en", "ax"], ["sl"]), h.make_node("Expand", ["sl", "es"], ["e"]),
         h.make_node("ConstantOfShape", ["s"], ["y"], value=h.make_tensor("v", T.FLOAT, [1], [1.5])),
         h.make_node("Where", ["c", "e", "e"], ["w"])],
        "g", [vi("x", shape=("N", 6)), vi("c", T.BOOL, (1, 1))], [vi("y", shape=None), vi("w", shape=None)],
        [const("i", np.array(0, np.int64)), const("ax", np.array([0], np.int64)), const("k", np.array([-1], np.int64)),
         const("st", np.array([0], np.int64)), const("en", np.array([2], np.int64)), const("es", np.array([2, 1], np.int64))])
    body = h.make_graph([h.make_node("Add", ["acc", "one"], ["acc2"]), h.make_node("Identity", ["cond"], ["cond2"])],
                        "body", [vi("it", T.INT64, ()), vi("cond", T.BOOL, ()), vi("acc", shape=(1,))],
                        [vi("cond2", T.BOOL, ()), vi("acc2", shape=(1,))], [const("one", np.ones(1, np.float32))])
    then = h.make_graph([h.make_node("Neg", ["x"], ["o"])], "then", [], [vi("o")])
    other = h.make_graph([h.make_node("Abs", ["x"], ["o"])], "else", [], [vi("o")])
    yield "control_flow", h.make_graph(
        [h.make_node("Loop", ["n", "t", "a0"], ["a"], body=body), h.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
         h.make_node("Greater", ["s", "z"], ["p"]), h.make_node("If", ["p"], ["y"], then_branch=then, else_branch=other)],
        "g", [vi("x")], [vi("y"), vi("a", shape=(1,))],
        [const("n", np.array(3, np.int64)), const("t", np.array(True)), const("a0", np.zeros(1, np.float32)),
         const("z", np.array(0, np.float32))])
    yield "attention_ln", h.make_graph(
        [h.make_node("MatMul", ["x", "wq"], ["q"]), h.make_node("MatMul", ["x", "wk"], ["k"]),
         h.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]), h.make_node("MatMul", ["q", "kt"], ["qk"]),
         h.make_node("Softmax", ["qk"], ["p"], axis=-1), h.make_node("MatMul", ["p", "x"], ["o"]),
         h.make_node("Add", ["o", "x"], ["r"]),
         h.make_node("LayerNormalization", ["r", "g", "b"], ["ln"], axis=-1, epsilon=1e-5),
         h.make_node("Erf", ["ln"], ["y"])],
        "g", [vi("x", shape=(1, 4, 8))], [vi("y", shape=(1, 4, 8))],
        [const("wq", rng.standard_normal((8, 8)).astype(np.float32)), const("wk", rng.standard_normal((8, 8)).astype(np.float32)),
         const("g", np.ones(8, np.float32)), const("b", np.zeros(8, np.float32))])
    yield "sequence_misc", h.make_graph(
        [h.make_node("SplitToSequence", ["x"], ["sq"], axis=0), h.make_node("SequenceAt", ["sq", "i"], ["e"]),
         h.make_node("TopK", ["e", "k"], ["v", "ix"], axis=-1), h.make_node("Cast", ["ix"], ["y"], to=T.FLOAT),
         h.make_node("ArgMax", ["x"], ["am"], axis=1), h.make_node("NonZero", ["am"], ["nz"])],
        "g", [vi("x")], [vi("y", shape=None), vi("nz", T.INT64, None)],
        [const("i", np.array(0, np.int64)), const("k", np.array([2], np.int64))])


# Issue #48's tiny models that once took gigabytes or never finished (import seeds only: they are
# meant to fail or run bounded, so no engine is built from them), each with its opset.
def hostile_models():
    yield "legacy_broadcast_axis_int64_max", 6, h.make_graph(
        [h.make_node("Add", ["a", "b"], ["y"], broadcast=1, axis=2**63 - 1)], "g",
        [vi("a", shape=(2, 3)), vi("b", shape=(3,))], [vi("y", shape=None)])
    yield "split_num_outputs_2_30", 18, h.make_graph(
        [h.make_node("Split", ["x"], ["y0", "y1", "y2"], num_outputs=1 << 30)], "g", [vi("x", shape=(6,))],
        [vi(f"y{i}", shape=None) for i in range(3)])
    yield "tfidf_skip_2_31", 9, h.make_graph(
        [h.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=2, max_gram_length=2,
                     max_skip_count=2**31, ngram_counts=[0, 0], ngram_indexes=[0], pool_int64s=[0, 1])], "g",
        [vi("x", T.INT64, (2, 6))], [vi("y", shape=None)])
    yield "reduce_sum_2_30_columns", 17, h.make_graph(
        [h.make_node("ReduceSum", ["x", "axes"], ["y"])], "g", [vi("x", shape=("", 1 << 30))], [vi("y", shape=None)],
        [const("axes", np.array([1], np.int64))])


def serve_seeds():
    """(name, bytes) for fuzz_serve: byte 0 picks the parser (0 HTTP, 1 gRPC, 2 config.pbtxt)."""
    from tritonclient.grpc import service_pb2  # noqa: PLC0415

    x = [0.5 * i for i in range(8)]
    json_inputs = [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": x},
                   {"name": "ids", "shape": [2, 3], "datatype": "INT64", "data": [1, 2, 3, 4, 5, 6]},
                   {"name": "s", "shape": [2, 1], "datatype": "INT32", "data": [-7, 2147483647]},
                   {"name": "b", "shape": [2, 2, 2], "datatype": "BOOL", "data": [True, False] * 4}]
    no_header = struct.pack("<I", 0xFFFFFFFF)
    body = json.dumps({"id": "7", "inputs": json_inputs,
                       "outputs": [{"name": "y"}, {"name": "t", "parameters": {"binary_data": True}}]}).encode()
    out = [("http_json", b"\x00" + no_header + body)]
    with_h = json_inputs + [{"name": "h", "shape": [2, 2], "datatype": "FP16", "data": [1.0, 2.0, 0.5, -1.0]}]
    body = json.dumps({"inputs": with_h, "parameters": {"timeout": 5000}}).encode()
    out.append(("http_json_optional_timeout", b"\x00" + no_header + body))
    # The binary extension: x's 32 bytes and s's 8 after the JSON header.
    raw_x = struct.pack("<8f", *x)
    raw_s = struct.pack("<2i", 1, -2)
    header = json.dumps({"inputs": [
        {"name": "x", "shape": [2, 4], "datatype": "FP32", "parameters": {"binary_data_size": len(raw_x)}},
        json_inputs[1],
        {"name": "s", "shape": [2, 1], "datatype": "INT32", "parameters": {"binary_data_size": len(raw_s)}},
        json_inputs[3]], "outputs": [{"name": "r", "parameters": {"binary_data": True}}]}).encode()
    out.append(("http_binary", b"\x00" + struct.pack("<I", len(header)) + header + raw_x + raw_s))
    # gRPC: raw contents, and typed contents.
    req = service_pb2.ModelInferRequest(model_name="m", id="g1")
    for name, dt, shape in (("x", "FP32", [2, 4]), ("ids", "INT64", [2, 2]), ("s", "INT32", [2, 1]),
                            ("b", "BOOL", [2, 2, 2])):
        t = req.inputs.add(name=name, datatype=dt)
        t.shape.extend(shape)
    req.raw_input_contents.extend([raw_x, struct.pack("<4q", 1, 2, 3, 4), raw_s, bytes([1, 0] * 4)])
    req.outputs.add(name="y")
    req.parameters["timeout"].int64_param = 1000
    out.append(("grpc_raw", b"\x01" + req.SerializeToString()))
    req = service_pb2.ModelInferRequest(model_name="m")
    t = req.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    t.contents.fp32_contents.extend([1, 2, 3, 4])
    t = req.inputs.add(name="ids", datatype="INT64", shape=[1, 2])
    t.contents.int64_contents.extend([7, 8])
    t = req.inputs.add(name="s", datatype="INT32", shape=[1, 1])
    t.contents.int_contents.extend([-3])
    t = req.inputs.add(name="b", datatype="BOOL", shape=[1, 2, 2])
    t.contents.bool_contents.extend([True, True, False, True])
    t = req.inputs.add(name="h", datatype="FP16", shape=[1, 2])
    out.append(("grpc_typed", b"\x01" + req.SerializeToString()))
    configs = {
        "config_batching": """name: "addmul"
backend: "kiln"
max_batch_size: 16
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "sum" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 30000 preferred_batch_size: [ 4, 8 ]
  default_queue_policy { max_queue_size: 64 default_timeout_microseconds: 100000 } }
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "precision" value: { string_value: "fp32" } }
parameters { key: "threads" value: { string_value: "2" } }
version_policy { specific { versions: [ 1, 3 ] } }
""",
        "config_reshape": """max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape: { shape: [ 4 ] } optional: true } ]
output [ { name: "sum" data_type: TYPE_FP16 dims: [ -1, 2 ] reshape: { shape: [ 4 ] } } ]
instance_group [ { kind: KIND_GPU gpus: [ 0, 1 ] } ]
version_policy { latest { num_versions: 2 } }
default_model_filename: "model.kiln"
""",
    }
    out += [(name, b"\x02" + text.encode()) for name, text in configs.items()]
    return out


def write_serve_seeds():
    os.makedirs(os.path.join(HERE, "corpus", "serve"), exist_ok=True)
    for name, data in serve_seeds():
        with open(os.path.join(HERE, "corpus", "serve", name), "wb") as f:
            f.write(data)


def main():
    if sys.argv[1:] == ["serve"]:
        write_serve_seeds()
        return
    write_serve_seeds()
    for sub in ("import", "engine", "npy"):
        os.makedirs(os.path.join(HERE, "corpus", sub), exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, graph in models():
            m = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], producer_name="kiln-seeds")
            path = os.path.join(HERE, "corpus", "import", name + ".onnx")
            onnx.save(m, path)
            eng = os.path.join(tmp, name + ".kiln")
            r = subprocess.run([KILN, "build", path, "-o", eng, "--opt-level", "2"], capture_output=True, text=True)
            assert r.returncode == 0, f"{name}: {r.stderr}"
            data = open(eng, "rb").read()
            assert data[-24:-16] == b"KILNSUM1"
            open(os.path.join(HERE, "corpus", "engine", name + ".fb"), "wb").write(data[:-24])
    for name, opset, graph in hostile_models():
        m = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], producer_name="kiln-seeds")
        onnx.save(m, os.path.join(HERE, "corpus", "import", name + ".onnx"))
    for name, arr in [("f32", np.arange(6, dtype=np.float32).reshape(2, 3)), ("i64", np.array([1, -2], np.int64)),
                      ("bool", np.array([True, False])), ("f16", np.ones((1, 2, 2), np.float16)),
                      ("scalar", np.array(3.5)), ("empty", np.zeros((0, 4), np.float32))]:
        np.save(os.path.join(HERE, "corpus", "npy", name + ".npy"), arr)


if __name__ == "__main__":
    main()
