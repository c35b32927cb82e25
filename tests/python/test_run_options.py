"""RunOptions as onnxruntime's: terminate (from another thread) and kiln's run_timeout_s stop a run."""

from __future__ import annotations

import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import kiln


def endless_loop_model() -> bytes:
    """y = a Loop of 2^62 iterations adding 1 (its trip count comes from input n, so nothing folds)."""
    body = h.make_graph([h.make_node("Add", ["acc", "one"], ["acc2"]), h.make_node("Identity", ["cond"], ["cond2"])],
                        "body", [h.make_tensor_value_info("it", T.INT64, []), h.make_tensor_value_info("cond", T.BOOL, []),
                                 h.make_tensor_value_info("acc", T.FLOAT, [1])],
                        [h.make_tensor_value_info("cond2", T.BOOL, []), h.make_tensor_value_info("acc2", T.FLOAT, [1])],
                        [h.make_tensor("one", T.FLOAT, [1], [1.0])])
    graph = h.make_graph([h.make_node("Loop", ["n", "t", "a0"], ["y"], body=body)], "endless",
                         [h.make_tensor_value_info("n", T.INT64, [])], [h.make_tensor_value_info("y", T.FLOAT, [1])],
                         [h.make_tensor("t", T.BOOL, [], [True]), h.make_tensor("a0", T.FLOAT, [1], [0.0])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8).SerializeToString()


@pytest.fixture(scope="module")
def session():
    return kiln.InferenceSession(endless_loop_model(), providers=["CPUExecutionProvider"])


def test_terminate_from_another_thread_stops_the_run(session):
    opts = kiln.RunOptions()
    threading.Timer(0.3, lambda: setattr(opts, "terminate", True)).start()
    t0 = time.monotonic()
    with pytest.raises(kiln.KilnError, match="Cancelled"):
        session.run(None, {"n": np.array(2**62, dtype=np.int64)}, opts)
    assert time.monotonic() - t0 < 30
    # While it stays set, runs with these options refuse at once; cleared, they run.
    with pytest.raises(kiln.KilnError, match="terminate"):
        session.run(None, {"n": np.array(3, dtype=np.int64)}, opts)
    opts.terminate = False
    (y,) = session.run(None, {"n": np.array(3, dtype=np.int64)}, opts)
    np.testing.assert_array_equal(y, [3.0])


def test_run_timeout_stops_the_run_and_later_runs_are_unlimited(session):
    opts = kiln.RunOptions()
    opts.run_timeout_s = 0.3
    with pytest.raises(kiln.KilnError, match="Cancelled"):
        session.run(None, {"n": np.array(2**62, dtype=np.int64)}, opts)
    # The limit belonged to that run: the same session's context runs without it afterwards.
    (y,) = session.run(None, {"n": np.array(1000, dtype=np.int64)})
    np.testing.assert_array_equal(y, [1000.0])


def test_terminate_does_not_touch_runs_without_these_options(session):
    opts = kiln.RunOptions()
    opts.terminate = True
    (y,) = session.run(None, {"n": np.array(5, dtype=np.int64)})
    np.testing.assert_array_equal(y, [5.0])
