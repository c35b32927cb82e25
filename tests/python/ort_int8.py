"""Shared by the Python tests that compare kiln's 8-bit products with ONNX Runtime's: whether ONNX
Runtime's are exact on this CPU, and an ONNX Runtime reference that is.

With AVX-512 VNNI (or AVX-VNNI) ONNX Runtime's uint8 x int8 products are exact. With AVX2 alone its
kernels add pairs of products in saturating 16-bit lanes (vpmaddubsw), so [255, 255] . [127, 127] gives
32767, not 64770 (onnxruntime 1.22 on an AMD EPYC without AVX-512, 2026-11-29), at every row count;
its QDQ convolutions with int8 activations were off the same way there (test_conv_qdq_folds_and_matches),
while its int8 x int8 MatMulInteger was exact ([-128, -128] . [-128, -128] = 32768). kiln's products are exact on every CPU, so there ONNX Runtime's fused
8-bit kernels are no reference: QDQ models are compared with ONNX Runtime's unfused float path instead
(optimizations off: DequantizeLinear, the float op, QuantizeLinear), and models made of integer ops
(QLinearConv, MatMulInteger) with kiln's general kernels at opt level 0, which onnx's node suite checks
exactly."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

_EXACT: list[bool] = []


def u8s8_exact() -> bool:
    """Whether ONNX Runtime's uint8 x int8 integer products are exact on this CPU (probed once)."""
    if not _EXACT:
        b = numpy_helper.from_array(np.full((2, 1), 127, np.int8), "b")
        g = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "probe",
                              [helper.make_tensor_value_info("a", TensorProto.UINT8, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)], [b])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 10
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        y = sess.run(None, {"a": np.full((2, 2), 255, np.uint8)})[0]  # two rows: a GEMM, not a GEMV
        _EXACT.append(bool(np.all(y == 2 * 255 * 127)))
    return _EXACT[0]


def qdq_reference(model_bytes: bytes) -> ort.InferenceSession:
    """ONNX Runtime on a QDQ model: its fused integer kernels where they are exact, else its float path."""
    so = ort.SessionOptions()
    if not u8s8_exact():
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
