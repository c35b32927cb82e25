"""CPU fast paths give the general kernels' bits: each case runs once in float32 (the fast path) and
once in float64 (the general N-d kernel, which sums and compares in double as the fast path does),
and the float32 result must equal the float64 one rounded to float32, element for element."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper

import kiln


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
    y64 = run(pool_model(op, np.float64, shape, **attrs), x.astype(np.float64))
    np.testing.assert_array_equal(y32, y64.astype(np.float32))
