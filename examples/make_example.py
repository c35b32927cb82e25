"""Generates kiln's bundled example: a small image classifier (Conv/BN/Relu/MaxPool blocks, global
pooling, Gemm, Softmax) with deterministic random weights, plus one input image.

    python examples/make_example.py [outdir]

Writes tiny_cnn.onnx and tiny_cnn_input.npy. Deterministic: the same bytes on every run.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(rng):
    nodes, inits = [], []

    def w(name, shape, scale=None):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        scale = scale if scale is not None else (2.0 / fan_in) ** 0.5
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    x = "image"
    channels = [3, 16, 32, 64]
    for i in range(3):
        cin, cout = channels[i], channels[i + 1]
        conv = f"conv{i}"
        nodes.append(helper.make_node("Conv", [x, w(f"{conv}.w", [cout, cin, 3, 3]), w(f"{conv}.b", [cout], 0.1)],
                                      [f"{conv}.y"], name=conv, pads=[1, 1, 1, 1]))
        bn = f"bn{i}"
        inits += [numpy_helper.from_array((1 + 0.1 * rng.standard_normal(cout)).astype(np.float32), f"{bn}.scale"),
                  numpy_helper.from_array((0.1 * rng.standard_normal(cout)).astype(np.float32), f"{bn}.bias"),
                  numpy_helper.from_array((0.1 * rng.standard_normal(cout)).astype(np.float32), f"{bn}.mean"),
                  numpy_helper.from_array((1 + 0.1 * rng.random(cout)).astype(np.float32), f"{bn}.var")]
        nodes.append(helper.make_node("BatchNormalization", [f"{conv}.y", f"{bn}.scale", f"{bn}.bias", f"{bn}.mean", f"{bn}.var"],
                                      [f"{bn}.y"], name=bn, epsilon=1e-5))
        nodes.append(helper.make_node("Relu", [f"{bn}.y"], [f"relu{i}.y"], name=f"relu{i}"))
        nodes.append(helper.make_node("MaxPool", [f"relu{i}.y"], [f"pool{i}.y"], name=f"pool{i}", kernel_shape=[2, 2], strides=[2, 2]))
        x = f"pool{i}.y"
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap.y"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap.y"], ["flat.y"], name="flatten", axis=1))
    nodes.append(helper.make_node("Gemm", ["flat.y", w("fc.w", [10, 64]), w("fc.b", [10], 0.1)], ["logits"], name="fc", transB=1))
    nodes.append(helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=-1))
    graph = helper.make_graph(
        nodes, "tiny_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 10])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln-example")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    rng = np.random.default_rng(2026)
    model = build(rng)
    onnx.save(model, os.path.join(out, "tiny_cnn.onnx"))
    np.save(os.path.join(out, "tiny_cnn_input.npy"), rng.random((1, 3, 32, 32), dtype=np.float32))
    print(f"wrote {out}/tiny_cnn.onnx and tiny_cnn_input.npy")


if __name__ == "__main__":
    main()
