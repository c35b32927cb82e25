"""The ONNX Runtime API holes of issue #46, each checked against onnxruntime itself where it runs here:
run_async, get_all_providers, get_version_string, set_seed, disable/enable_fallback, RunOptions' config
entries, OrtValue.update_inplace / has_value / element_type, graph_optimization_level's check, the
kiln.capi module paths, and end_profiling's file in ONNX Runtime's format. Small models: fast on 2 cores."""

from __future__ import annotations

import json
import threading

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln


def add_relu_model() -> bytes:
    """y = Relu(x + b), x: float [2, 3] (IR 8: onnxruntime 1.22 reads it)."""
    b = numpy_helper.from_array(np.array([0.5, -1.0, 2.0], np.float32), "b")
    g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["s"], name="add"),
                           helper.make_node("Relu", ["s"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def random_model(seed: float | None = None) -> bytes:
    """RandomNormal [64] (+ 0 * x, so the model has an input), with or without a seed attribute."""
    attrs = {"shape": [64]} if seed is None else {"shape": [64], "seed": seed}
    g = helper.make_graph([helper.make_node("RandomNormal", [], ["r"], **attrs),
                           helper.make_node("Mul", ["x", "zero"], ["z"]), helper.make_node("Add", ["r", "z"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])],
                          [numpy_helper.from_array(np.zeros(1, np.float32), "zero")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


X = np.array([[1.0, -2.0, 0.25], [-0.5, 3.0, -4.0]], np.float32)


@pytest.fixture(scope="module")
def sessions():
    model = add_relu_model()
    return kiln.InferenceSession(model), ort.InferenceSession(model, providers=["CPUExecutionProvider"])


# ---- run_async


def _run_async(sess, names, feed, run_options=None):
    """Calls sess.run_async(names, feed, callback, "data", run_options); returns (results, user_data, err, ran on the calling thread)."""
    done = threading.Event()
    got = {}

    def callback(results, user_data, err):
        got.update(results=results, user_data=user_data, err=err, same_thread=threading.current_thread() is caller)
        done.set()

    caller = threading.current_thread()
    assert sess.run_async(names, feed, callback, "data", run_options) is None
    assert done.wait(30), "the callback was not called"
    return got["results"], got["user_data"], got["err"], got["same_thread"]


def test_run_async_calls_back_as_onnxruntime(sessions):
    ks, os_ = sessions
    for names in (None, ["y"]):
        kr, kd, ke, kt = _run_async(ks, names, {"x": X})
        orr, od, oe, ot = _run_async(os_, names, {"x": X})
        assert (ke, kd, kt) == (oe, od, ot) == ("", "data", False)
        assert type(kr) is type(orr) is list and len(kr) == len(orr) == 1
        assert type(kr[0]) is type(orr[0]) is np.ndarray
        np.testing.assert_array_equal(kr[0], orr[0])


@pytest.mark.parametrize("feed, names", [({"x": np.ones((3, 3), np.float32)}, None),  # a wrong shape
                                         ({"x": X.astype(np.float64)}, None),           # a wrong dtype
                                         ({"x": X}, ["nope"])])                          # an unknown output
def test_run_async_reports_errors_through_the_callback(sessions, feed, names):
    for sess in sessions:
        results, user_data, err, _ = _run_async(sess, names, feed)
        assert results == [] and user_data == "data" and isinstance(err, str) and err, (type(sess), err)


def test_run_async_refuses_a_missing_input_at_once(sessions):
    for sess in sessions:
        with pytest.raises(ValueError, match=r"Required inputs \(\['x'\]\) are missing"):
            sess.run_async(None, {}, lambda *a: None, None)


def test_run_async_with_terminate_set_reports_the_stop(sessions):
    for sess, opts in ((sessions[0], kiln.RunOptions()), (sessions[1], ort.RunOptions())):
        opts.terminate = True
        results, _, err, _ = _run_async(sess, None, {"x": X}, opts)
        assert results == [] and err


def test_many_run_async_calls_all_complete(sessions):
    ks, _ = sessions
    lock, seen, done = threading.Lock(), [], threading.Event()

    def callback(results, k, err):
        with lock:
            seen.append((k, err, results[0] if results else None))
            if len(seen) == 24:
                done.set()

    xs = [X * k for k in range(24)]
    for k in range(24):
        ks.run_async(None, {"x": xs[k]}, callback, k)
    assert done.wait(60)
    for k, err, y in seen:
        assert err == ""
        np.testing.assert_array_equal(y, np.maximum(xs[k] + [0.5, -1.0, 2.0], 0))


def test_an_error_in_the_callback_is_reported_as_a_threads(sessions, monkeypatch):
    seen, done = [], threading.Event()

    def hook(args):
        seen.append(args.exc_type)
        done.set()

    def callback(results, user_data, err):
        raise KeyError("the callback's own bug")

    monkeypatch.setattr(threading, "excepthook", hook)
    sessions[0].run_async(None, {"x": X}, callback, None)
    assert done.wait(30) and seen == [KeyError]


# ---- module functions


def test_providers_and_version_string():
    everything = kiln.get_all_providers()
    assert everything[-1] == "CPUExecutionProvider" and set(kiln.get_available_providers()) <= set(everything)
    assert set(everything) <= set(ort.get_all_providers())  # ONNX Runtime's names
    assert kiln.get_version_string() == kiln.__version__ and isinstance(ort.get_version_string(), str)


def test_set_seed_makes_unseeded_random_ops_repeat():
    x = np.zeros(64, np.float32)

    def draws(lib, model, seed):
        lib.set_seed(seed)
        sess = lib.InferenceSession(model, providers=["CPUExecutionProvider"])
        return sess.run(None, {"x": x})[0], sess.run(None, {"x": x})[0]

    for lib in (kiln, ort):  # the same promise in both: a fresh session after set_seed(n) draws the same numbers
        a1, a2 = draws(lib, random_model(), 7)
        b1, b2 = draws(lib, random_model(), 7)
        c1, _ = draws(lib, random_model(), 8)
        np.testing.assert_array_equal(a1, b1)
        np.testing.assert_array_equal(a2, b2)
        assert not np.array_equal(a1, a2) and not np.array_equal(a1, c1), lib.__name__
        assert abs(float(np.mean(a1))) < 0.5 and 0.6 < float(np.std(a1)) < 1.4  # still N(0, 1)
    # An op's own seed attribute wins over set_seed.
    s1, _ = draws(kiln, random_model(seed=3.0), 7)
    s2, _ = draws(kiln, random_model(seed=3.0), 8)
    np.testing.assert_array_equal(s1, s2)
    with pytest.raises(TypeError):
        kiln.set_seed("7")


def test_fallback_switches_exist_and_change_no_result(sessions):
    ks, os_ = sessions
    for sess in sessions:
        assert sess.disable_fallback() is None and sess.enable_fallback() is None
        sess.disable_fallback()
    np.testing.assert_array_equal(ks.run(None, {"x": X})[0], os_.run(None, {"x": X})[0])


def test_run_config_entries_as_onnxruntime():
    for opts in (kiln.RunOptions(), ort.RunOptions()):
        opts.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        opts.add_run_config_entry("k", "1")
        opts.add_run_config_entry("k", "2")  # replaced
        assert opts.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
        assert opts.get_run_config_entry("k") == "2"
        with pytest.raises(RuntimeError, match="does not have configuration with key: missing"):
            opts.get_run_config_entry("missing")


def test_a_session_runs_with_config_entries(sessions):
    opts = kiln.RunOptions()
    opts.add_run_config_entry("gpu_graph_id", "1")
    np.testing.assert_array_equal(sessions[0].run(None, {"x": X}, opts)[0], sessions[1].run(None, {"x": X})[0])


# ---- OrtValue


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int64, np.int32, np.int8, np.uint8, np.bool_])
def test_element_type_and_has_value_as_onnxruntime(dtype):
    a = np.zeros((2, 3), dtype)
    k, o = kiln.OrtValue.ortvalue_from_numpy(a), ort.OrtValue.ortvalue_from_numpy(a)
    assert k.element_type() == o.element_type() and type(k.element_type()) is type(o.element_type()) is int
    assert k.data_type() == o.data_type()
    assert k.has_value() is o.has_value() is True


def test_update_inplace_as_onnxruntime():
    base = np.zeros((2, 3), np.float32)
    new = np.arange(6, dtype=np.float32).reshape(2, 3)
    for lib in (kiln, ort):
        v = lib.OrtValue.ortvalue_from_numpy(base.copy())
        ptr = v.data_ptr()
        v.update_inplace(new)
        assert v.data_ptr() == ptr
        np.testing.assert_array_equal(v.numpy(), new)
        v.update_inplace(np.full(6, 7, np.float32))  # another shape of the same size: ONNX Runtime takes it too
        np.testing.assert_array_equal(v.numpy(), np.full((2, 3), 7, np.float32))
        with pytest.raises((ValueError, RuntimeError), match="(?i)size"):
            v.update_inplace(np.zeros((3, 3), np.float32))
    # An array that is not contiguous: its values in order (ONNX Runtime 1.22 copies its raw memory as if it were).
    v = kiln.OrtValue.ortvalue_from_numpy(base.copy())
    v.update_inplace(new[::-1, ::-1])
    np.testing.assert_array_equal(v.numpy(), new[::-1, ::-1])
    # ONNX Runtime copies another dtype's bytes as they are; kiln refuses it.
    with pytest.raises(TypeError, match="dtype"):
        kiln.OrtValue.ortvalue_from_numpy(base.copy()).update_inplace(np.zeros((2, 3), np.float64))


def test_update_inplace_changes_what_a_bound_input_reads(sessions):
    ks, _ = sessions
    v = kiln.OrtValue.ortvalue_from_numpy(X.copy())
    binding = ks.io_binding()
    binding.bind_ortvalue_input("x", v)
    binding.bind_output("y")
    ks.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], np.maximum(X + [0.5, -1.0, 2.0], 0))
    v.update_inplace(-X)
    ks.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], np.maximum(-X + [0.5, -1.0, 2.0], 0))


def test_update_inplace_refuses_a_read_only_array():  # ONNX Runtime 1.22 writes into it
    ro = np.zeros(3, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="cannot be written"):
        kiln.OrtValue.ortvalue_from_numpy(ro).update_inplace(np.ones(3, np.float32))


# ---- SessionOptions.graph_optimization_level


@pytest.mark.parametrize("bad", [5, -1, 3, "ORT_ENABLE_ALL", None, 2.0, True])
def test_an_invalid_optimization_level_is_refused_as_onnxruntime_does(bad):
    for lib in (kiln, ort):
        opts = lib.SessionOptions()
        with pytest.raises(TypeError):
            opts.graph_optimization_level = bad
        assert opts.graph_optimization_level == lib.GraphOptimizationLevel.ORT_ENABLE_ALL


def test_valid_optimization_levels_are_taken():
    opts = kiln.SessionOptions()
    for name in ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL"):
        assert hasattr(ort.GraphOptimizationLevel, name)
        opts.graph_optimization_level = getattr(kiln.GraphOptimizationLevel, name)
        assert opts.graph_optimization_level.name == name
    opts.graph_optimization_level = 1  # kiln also takes a level's value as a plain int
    assert opts.graph_optimization_level is kiln.GraphOptimizationLevel.ORT_ENABLE_BASIC
    y = kiln.InferenceSession(add_relu_model(), opts).run(None, {"x": X})[0]
    np.testing.assert_array_equal(y, np.maximum(X + [0.5, -1.0, 2.0], 0))


# ---- kiln.capi


def test_capi_module_paths_import_onnxruntime_names():
    from kiln.capi.onnxruntime_pybind11_state import (  # noqa: PLC0415
        EPFail, Fail, InvalidArgument, InvalidGraph, InvalidProtobuf, ModelLoaded, NoModel, NoSuchFile, NotImplemented,
        RuntimeException)
    from kiln.capi._pybind_state import get_available_providers  # noqa: PLC0415
    from kiln.capi.onnxruntime_inference_collection import InferenceSession, OrtValue  # noqa: PLC0415

    import onnxruntime.capi.onnxruntime_pybind11_state as ort_state  # noqa: PLC0415
    import kiln.capi.onnxruntime_pybind11_state as kiln_state  # noqa: PLC0415

    # Every exception class ONNX Runtime's native module exports has a kiln name there.
    ort_errors = {n for n in dir(ort_state) if isinstance(getattr(ort_state, n), type)
                  and issubclass(getattr(ort_state, n), Exception)}
    assert ort_errors and ort_errors <= set(dir(kiln_state)), ort_errors - set(dir(kiln_state))
    for cls in (EPFail, Fail, InvalidArgument, InvalidGraph, InvalidProtobuf, ModelLoaded, NoModel, NoSuchFile,
                NotImplemented, RuntimeException):
        assert issubclass(cls, kiln.KilnError) and issubclass(cls, RuntimeError)
    assert InferenceSession is kiln.InferenceSession and OrtValue is kiln.OrtValue
    assert get_available_providers() == kiln.get_available_providers()


def test_capi_exceptions_catch_what_kiln_raises(sessions, tmp_path):
    from kiln.capi.onnxruntime_pybind11_state import InvalidArgument, InvalidProtobuf, NoSuchFile  # noqa: PLC0415

    ks, os_ = sessions
    for sess, exc in ((ks, InvalidArgument), (os_, ort.capi.onnxruntime_pybind11_state.InvalidArgument)):
        with pytest.raises(exc):
            sess.run(None, {"x": X.astype(np.int64)})
    with pytest.raises(NoSuchFile):
        kiln.InferenceSession(str(tmp_path / "missing.onnx"))
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x08\x07\x12\xff\xff\xff")
    with pytest.raises(InvalidProtobuf):
        kiln.InferenceSession(str(junk))


# ---- end_profiling


def _profile(lib, model, tmp_path):
    so = lib.SessionOptions()
    so.graph_optimization_level = lib.GraphOptimizationLevel.ORT_DISABLE_ALL  # both keep the two nodes
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / f"{lib.__name__}_prof")
    sess = lib.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    for _ in range(2):
        sess.run(None, {"x": X})
    with open(sess.end_profiling()) as f:
        return json.load(f)


def test_end_profiling_writes_onnxruntime_format(tmp_path):
    model = add_relu_model()
    kp, op = _profile(kiln, model, tmp_path), _profile(ort, model, tmp_path)
    for events in (kp, op):
        assert isinstance(events, list) and events
        for e in events:
            assert {"cat", "name", "ph", "ts", "dur", "pid", "tid", "args"} <= set(e), e
            assert e["ph"] == "X" and isinstance(e["ts"], int) and isinstance(e["dur"], int) and e["dur"] >= 0
        assert {e["cat"] for e in events} == {"Session", "Node"}
    # The events a script reads: one model_run per run, the session's initialization, one
    # <node>_kernel_time per node and run with op_name, provider and shapes as ONNX Runtime writes them.
    for events in (kp, op):
        names = [e["name"] for e in events if e["cat"] == "Session"]
        assert names.count("model_run") == 2 and "session_initialization" in names
    o_nodes = [e for e in op if e["cat"] == "Node"]
    k_nodes = [e for e in kp if e["cat"] == "Node"]
    assert all(e["name"].endswith("_kernel_time") for e in o_nodes + k_nodes)
    assert [e["args"]["op_name"] for e in k_nodes] == [e["args"]["op_name"] for e in o_nodes] == ["Add", "Relu"] * 2
    assert [e["name"] for e in k_nodes] == [e["name"] for e in o_nodes] == ["add_kernel_time", "relu_kernel_time"] * 2
    for e in k_nodes:
        assert e["args"]["provider"] == "CPUExecutionProvider" and e["args"]["output_size"] == "24"
        assert e["args"]["output_type_shape"] == [{"float": [2, 3]}]
        assert {"float": [2, 3]} in e["args"]["input_type_shape"]
    first = next(e for e in o_nodes if e["args"]["op_name"] == "Add")
    assert first["args"]["output_type_shape"] == [{"float": [2, 3]}] and first["args"]["output_size"] == "24"
    # Nodes lie inside their run.
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in kp if e["name"] == "model_run")
    for e in k_nodes:
        assert any(a <= e["ts"] and e["ts"] + e["dur"] <= b + 1 for a, b in runs), (e, runs)


def test_a_second_profile_holds_only_the_later_runs(tmp_path):
    so = kiln.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "p")
    sess = kiln.InferenceSession(add_relu_model(), so)
    sess.run(None, {"x": X})
    first = sess.end_profiling()
    sess.run(None, {"x": X})
    sess.run(None, {"x": X})
    second = sess.end_profiling()
    assert first != second
    with open(second) as f:
        events = json.load(f)
    assert [e["name"] for e in events if e["cat"] == "Session"] == ["model_run", "model_run"]


def test_free_dimension_override_says_what_to_do_instead():
    """SessionOptions.add_free_dimension_override_by_name raises NotImplementedError naming the way kiln
    does it (it raised TypeError: `raise NotImplemented(...)` calls a constant)."""
    so = kiln.SessionOptions()
    with pytest.raises(NotImplementedError, match="shape profiles"):
        so.add_free_dimension_override_by_name("batch", 1)
