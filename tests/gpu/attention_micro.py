"""One kiln.Attention node (12 heads of 64) as an ONNX model, for timing the kernel alone.

    python3 tests/gpu/attention_micro.py BATCH SEQ fp16|fp32 causal_bool|causal_add|none OUT.onnx

causal_bool: a [1,1,S,S] keep-where-true bool mask with a fill of -inf; causal_add: GPT-2's additive
[B,1,S,S] mask of 0 and -inf; none: no mask. Q, K and V are inputs [B, S, 768] (kiln bench fills them).
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HEADS, HEAD_SIZE = 12, 64


def attention_model(batch: int, seq: int, half: bool, kind: str) -> onnx.ModelProto:
    dt = TensorProto.FLOAT16 if half else TensorProto.FLOAT
    width = HEADS * HEAD_SIZE
    inputs = [helper.make_tensor_value_info(n, dt, [batch, seq, width]) for n in "qkv"]
    inits, node_in = [], ["q", "k", "v"]
    attrs = dict(num_heads=HEADS, scale=HEAD_SIZE ** -0.5)
    causal = np.tril(np.ones((seq, seq), bool))
    if kind == "causal_bool":
        inits.append(numpy_helper.from_array(causal.reshape(1, 1, seq, seq), "cond"))
        node_in += ["", "cond"]
        attrs.update(mask_fill=float("-inf"), mask_fill_where_true=0)
    elif kind == "causal_add":
        add = np.where(causal, 0, -np.inf).astype(np.float16 if half else np.float32)
        inits.append(numpy_helper.from_array(np.broadcast_to(add, (batch, 1, seq, seq)).copy(), "mask"))
        node_in.append("mask")
    elif kind != "none":
        raise SystemExit(f"unknown mask kind {kind!r}")
    node = helper.make_node("Attention", node_in, ["y"], domain="kiln", **attrs)
    graph = helper.make_graph([node], "attention", inputs,
                              [helper.make_tensor_value_info("y", dt, [batch, seq, width])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("kiln", 1)])


if __name__ == "__main__":
    b, s, precision, kind, path = sys.argv[1:6]
    onnx.save(attention_model(int(b), int(s), precision == "fp16", kind), path)
