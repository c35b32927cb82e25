"""Hostile models and files through the `kiln` command: each must give a clear error (exit 1 and a
message naming what is wrong), never a crash (a signal), an abort or a file written outside the
folder it was asked for. The regressions of the reliability audit, one test each."""

from __future__ import annotations

import os
import struct
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# KILN_CLI: another build of the command (scripts/sanitize.sh runs these through the sanitized one).
KILN = os.environ.get("KILN_CLI") or os.path.join(REPO, "build", "kiln")


def kiln(*args, cwd=None, env=None, timeout=60):
    r = subprocess.run([KILN, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)
    assert r.returncode >= 0, f"kiln {args[0]} died of signal {-r.returncode}: {r.stderr[-500:]}"
    return r


def model(tmp_path, name, nodes, inputs=(), outputs=(), inits=(), opset=17):
    g = h.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    path = tmp_path / name
    path.write_bytes(m.SerializeToString())  # no checker: these models are wrong on purpose
    return path


def y_out(name="y", shape=None):
    return h.make_tensor_value_info(name, T.FLOAT, shape)


X = h.make_tensor_value_info("x", T.FLOAT, [2, 3])


@pytest.mark.parametrize("op,ins,outs,want", [
    ("Relu", [], ["y"], "takes 1 input, got 0"),
    ("Relu", ["x", "x", "x"], ["y"], "takes 1 input, got 3"),
    ("Add", ["x"], ["y"], "takes 2 inputs, got 1"),
    ("ConvTranspose", ["x"], ["y"], "takes 2 to 3 inputs, got 1"),
    ("Einsum", ["x"], [], "takes 1 output, got 0"),
    ("Concat", ["x", ""], ["y"], "input 1 is required but empty"),
    ("Gemm", ["", "x"], ["y"], "input 0 is required but empty"),
])
def test_node_arity_checked_at_import(tmp_path, op, ins, outs, want):
    p = model(tmp_path, "m.onnx", [h.make_node(op, ins, outs, axis=0) if op == "Concat" else h.make_node(op, ins, outs)],
              [X] if "x" in ins else [], [y_out()] if outs else [])
    for cmd in (["info", p], ["build", p, "-o", tmp_path / "m.kiln"], ["run", p]):
        r = kiln(*cmd)
        assert r.returncode == 1, (cmd, r.stdout, r.stderr)
        assert want in r.stderr and f"({op})" in r.stderr, r.stderr


@pytest.mark.parametrize("dims", [[2**32, 2**32], [2**63 - 1], [2**62 + 16], [1 << 40]])
def test_huge_constant_of_shape_is_an_error(tmp_path, dims):
    shape = h.make_tensor("s", T.INT64, [len(dims)], dims)
    p = model(tmp_path, "m.onnx", [h.make_node("ConstantOfShape", ["s"], ["y"])], [], [y_out()], [shape])
    r = kiln("build", p, "-o", tmp_path / "m.kiln")
    assert r.returncode == 0, r.stderr  # not folded (too large): the build itself is fine
    r = kiln("run", p, "--max-tensor-bytes", 1 << 30)
    assert r.returncode == 1 and "ConstantOfShape" in r.stderr, r.stderr
    assert "too large" in r.stderr or "over the limit" in r.stderr, r.stderr


@pytest.mark.parametrize("reader", [("Transpose", {"perm": [1, 0]}), ("Flatten", {"axis": 1}), ("Relu", {}),
                                    ("ReduceSum", {"keepdims": 1})])
def test_readers_of_a_tensor_too_large_to_exist(tmp_path, reader):
    # The memory planner must not hand a shape whose size overflows to the kernels that would read it
    # (Transpose's strides overflowed there: a UBSan report in the sanitizer job's fuzzing). The step
    # that would make the tensor fails with a clear error instead.
    op, attrs = reader
    shape = h.make_tensor("s", T.INT64, [2], [2**32, 2**32])
    nodes = [h.make_node("ConstantOfShape", ["s"], ["c"]), h.make_node(op, ["c"], ["y"], **attrs)]
    p = model(tmp_path, "m.onnx", nodes, [], [y_out()], [shape])
    r = kiln("run", p)
    assert r.returncode == 1 and "'ConstantOfShape_0' (ConstantOfShape)" in r.stderr, r.stderr
    assert "too large" in r.stderr and "runtime error" not in r.stderr, r.stderr


def test_expand_and_tile_past_the_limit(tmp_path):
    nodes = [h.make_node("Expand", ["x", "s"], ["e"]), h.make_node("Tile", ["x", "r"], ["y"])]
    inits = [h.make_tensor("s", T.INT64, [4], [1 << 20, 1 << 20, 2, 3]), h.make_tensor("r", T.INT64, [2], [1 << 31, 1 << 31])]
    p = model(tmp_path, "m.onnx", nodes, [X], [y_out(), y_out("e")], inits)
    r = kiln("run", p, "--max-tensor-bytes", 1 << 30)
    assert r.returncode == 1 and ("too large" in r.stderr or "over the limit" in r.stderr), r.stderr


def test_max_tensor_bytes_limits_a_normal_model(tmp_path):
    shape = h.make_tensor("s", T.INT64, [1], [1 << 20])  # 4 MiB of float32
    p = model(tmp_path, "m.onnx", [h.make_node("ConstantOfShape", ["s"], ["y"])], [], [y_out()], [shape])
    assert kiln("run", p).returncode == 0
    r = kiln("run", p, "--max-tensor-bytes", 1 << 20)
    assert r.returncode == 1 and "over the limit of 1048576" in r.stderr, r.stderr
    env = dict(os.environ, KILN_MAX_TENSOR_BYTES=str(1 << 20))
    r = kiln("run", p, env=env)
    assert r.returncode == 1 and "max_tensor_bytes" in r.stderr, r.stderr


def test_max_memory_bounds_what_a_run_holds_at_once(tmp_path):
    # Each tensor is under the tensor limit; together (weights, activations) they are over the
    # memory limit: the build or run stops with the limit named, exit 1, no abort.
    w = h.make_tensor("w", T.FLOAT, [512, 512], np.ones(512 * 512, np.float32))
    nodes = [h.make_node("MatMul", ["x", "w"], ["a"]), h.make_node("Relu", ["a"], ["b"]),
             h.make_node("MatMul", ["b", "w"], ["y"])]
    xin = h.make_tensor_value_info("x", T.FLOAT, [256, 512])
    p = model(tmp_path, "m.onnx", nodes, [xin], [y_out("y", [256, 512])], [w])
    assert kiln("run", p).returncode == 0
    for args, env in ((("--max-memory", 1 << 20), None), ((), dict(os.environ, KILN_MAX_MEMORY_BYTES=str(1 << 20)))):
        r = kiln("run", p, *args, env=env)
        assert r.returncode == 1 and "max_memory_bytes" in r.stderr, r.stderr
        assert "over the limit of 1048576" in r.stderr, r.stderr


def test_output_names_cannot_escape_the_output_dir(tmp_path):
    names = ["../../evil", "/tmp/abs_evil", "..", "a/b", "ok"]
    nodes = [h.make_node("Relu", ["x"], [n]) for n in names]
    p = model(tmp_path, "m.onnx", nodes, [X], [y_out(n, [2, 3]) for n in names])
    out = tmp_path / "deep" / "out"
    r = kiln("run", p, "--output-dir", out)
    assert r.returncode == 0, r.stderr
    written = sorted(os.listdir(out))
    assert len(written) == len(names) and "ok.npy" in written, written
    for root, _dirs, files in os.walk(tmp_path):
        for f in files:
            assert os.path.dirname(os.path.join(root, f)) in (str(out), str(tmp_path)), (root, f)
    assert not os.path.exists("/tmp/abs_evil.npy")
    # Every file holds its output.
    for f in written:
        assert np.load(out / f).shape == (2, 3)


def test_output_dir_that_cannot_be_made(tmp_path):
    p = model(tmp_path, "m.onnx", [h.make_node("Relu", ["x"], ["y"])], [X], [y_out("y", [2, 3])])
    (tmp_path / "file").write_text("not a folder")
    r = kiln("run", p, "--output-dir", tmp_path / "file" / "sub")
    assert r.returncode == 1 and "--output-dir" in r.stderr and "cannot create" in r.stderr, r.stderr


def test_npy_claiming_more_than_it_holds(tmp_path):
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (100000, 100000, 100), }"
    header += b" " * (117 - len(header)) + b"\n"
    (tmp_path / "big.npy").write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + b"\0" * 8)
    p = model(tmp_path, "m.onnx", [h.make_node("Relu", ["x"], ["y"])], [X], [y_out("y", [2, 3])])
    r = kiln("run", p, "-i", f"x={tmp_path / 'big.npy'}")
    assert r.returncode == 1 and "shorter than its shape" in r.stderr, r.stderr


def test_roi_align_sampling_grid_over_the_limit_is_an_error(tmp_path):
    # RoiAlign with an enormous sampling ratio: once refused inside the thread team (two rois, two
    # threads), now before it, per roi; either way an error, not std::terminate or a run of minutes.
    # (parallel_for's own exception forwarding is tested in tests/unit/test_parallel.cpp.)
    x = h.make_tensor_value_info("x", T.FLOAT, [1, 1, 8, 8])
    rois = h.make_tensor("rois", T.FLOAT, [2, 4], [0, 0, 7, 7, 0, 0, 7, 7])
    idx = h.make_tensor("idx", T.INT64, [2], [0, 0])
    node = h.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], output_height=64, output_width=64,
                       sampling_ratio=100000)
    p = model(tmp_path, "m.onnx", [node], [x], [y_out()], [rois, idx])
    env = dict(os.environ, OMP_NUM_THREADS="2")
    r = kiln("run", p, "--max-tensor-bytes", 1 << 26, env=env, timeout=120)
    assert r.returncode == 1 and "RoiAlign" in r.stderr and "sampling grid" in r.stderr, r.stderr


def test_integer_division_edge_cases(tmp_path):
    a = h.make_tensor_value_info("a", T.INT64, [3])
    b = h.make_tensor_value_info("b", T.INT64, [3])
    p = model(tmp_path, "m.onnx", [h.make_node("Div", ["a", "b"], ["y"])], [a, b], [h.make_tensor_value_info("y", T.INT64, [3])])
    np.save(tmp_path / "a.npy", np.array([np.iinfo(np.int64).min, 7, -7], dtype=np.int64))
    np.save(tmp_path / "b.npy", np.array([-1, 0, 2], dtype=np.int64))
    out = tmp_path / "out"
    r = kiln("run", p, "-i", f"a={tmp_path / 'a.npy'}", "-i", f"b={tmp_path / 'b.npy'}", "--output-dir", out)
    assert r.returncode == 0, r.stderr
    y = np.load(out / "y.npy")
    assert y[0] == np.iinfo(np.int64).min and y[2] == -3, y  # MIN / -1 wraps (as numpy does); trunc toward 0


@pytest.mark.parametrize("op,dtype,a,b", [
    ("Add", np.int64, [2**63 - 1, -(2**63)], [1, -1]),
    ("Sub", np.int64, [-(2**63), 2**63 - 1], [1, -1]),
    ("Mul", np.int64, [2**62, -(2**63)], [4, -1]),
    ("Mul", np.int32, [2**30, 46341], [4, 46341]),
    ("Mul", np.uint16, [65535, 300], [65535, 300]),  # promoted to int in C++: 65535 * 65535 overflows int
    ("Mod", np.int64, [-(2**63), 7], [-1, -1]),
    ("Neg", np.int64, [-(2**63), 5], None),
    ("Abs", np.int32, [-(2**31), -5], None),
])
def test_integer_overflow_wraps_as_numpy(tmp_path, op, dtype, a, b):
    # Integer arithmetic past the type's range wraps (two's complement) as numpy and ONNX Runtime do; in
    # the sanitizer job UBSan fails this test if any of it is signed overflow.
    a = np.array(a, dtype=dtype)
    et = h.np_dtype_to_tensor_dtype(a.dtype)
    ins = [h.make_tensor_value_info("a", et, [2])] + ([h.make_tensor_value_info("b", et, [2])] if b is not None else [])
    p = model(tmp_path, "m.onnx", [h.make_node(op, [i.name for i in ins], ["y"])], ins, [h.make_tensor_value_info("y", et, [2])])
    np.save(tmp_path / "a.npy", a)
    args = ["-i", f"a={tmp_path / 'a.npy'}"]
    if b is not None:
        np.save(tmp_path / "b.npy", np.array(b, dtype=dtype))
        args += ["-i", f"b={tmp_path / 'b.npy'}"]
    out = tmp_path / "out"
    r = kiln("run", p, *args, "--output-dir", out)
    assert r.returncode == 0, r.stderr
    with np.errstate(over="ignore"):
        bb = np.array(b, dtype=dtype) if b is not None else None
        want = {"Add": lambda: a + bb, "Sub": lambda: a - bb, "Mul": lambda: a * bb, "Neg": lambda: -a,
                "Abs": lambda: np.abs(a), "Mod": lambda: np.zeros_like(a)}[op]()  # x mod -1 = 0 (numpy warns on MIN)
    np.testing.assert_array_equal(np.load(out / "y.npy"), want)


@pytest.mark.parametrize("step", [2**63 - 1, -(2**63), 2**62, -(2**62)])
def test_slice_with_extreme_steps(tmp_path, step):
    x = h.make_tensor_value_info("x", T.FLOAT, [5])
    inits = [h.make_tensor("st", T.INT64, [1], [0 if step > 0 else 4]),
             h.make_tensor("en", T.INT64, [1], [2**63 - 1 if step > 0 else -(2**63)]),
             h.make_tensor("ax", T.INT64, [1], [0]), h.make_tensor("sp", T.INT64, [1], [step])]
    p = model(tmp_path, "m.onnx", [h.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], [x], [y_out()], inits)
    np.save(tmp_path / "x.npy", np.arange(5, dtype=np.float32))
    out = tmp_path / "out"
    r = kiln("run", p, "-i", f"x={tmp_path / 'x.npy'}", "--output-dir", out)
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(np.load(out / "y.npy"), np.arange(5, dtype=np.float32)[0 if step > 0 else 4::step])


@pytest.mark.parametrize("shape", ["chain", "fan"])
def test_large_graphs_build_in_linear_time(tmp_path, shape):
    # 10^5 nodes: a chain, or 10^5 consumers of one value (merged by CSE). The verifier, node removal
    # and the arena planner were quadratic (minutes at this size); each now takes about a second.
    n = 100_000
    if shape == "chain":
        nodes = [h.make_node("Relu", ["x" if i == 0 else f"v{i - 1}"], [f"v{i}"]) for i in range(n)]
        out = f"v{n - 1}"
    else:
        nodes = [h.make_node("Relu", ["x"], [f"c{i}"]) for i in range(n)]
        nodes.append(h.make_node("Sum", [f"c{i}" for i in range(n)], ["y"]))
        out = "y"
    p = model(tmp_path, "m.onnx", nodes, [X], [y_out(out, [2, 3])])
    for cmd in (["info", p], ["build", p, "-o", tmp_path / "m.kiln"], ["run", tmp_path / "m.kiln"]):
        r = kiln(*cmd, timeout=120)
        assert r.returncode == 0, (cmd, r.stderr[-500:])


def test_a_loop_that_never_ends_stops_at_the_timeout(tmp_path):
    # Loop with trip count 2^62: `--timeout` (ExecutionContext::set_run_timeout) stops it between steps.
    body = h.make_graph([h.make_node("Add", ["acc", "one"], ["acc2"]), h.make_node("Identity", ["cond"], ["cond2"])],
                        "body", [h.make_tensor_value_info("it", T.INT64, []), h.make_tensor_value_info("cond", T.BOOL, []),
                                 h.make_tensor_value_info("acc", T.FLOAT, [1])],
                        [h.make_tensor_value_info("cond2", T.BOOL, []), h.make_tensor_value_info("acc2", T.FLOAT, [1])],
                        [h.make_tensor("one", T.FLOAT, [1], [1.0])])
    inits = [h.make_tensor("n", T.INT64, [], [2**62]), h.make_tensor("t", T.BOOL, [], [True]),
             h.make_tensor("a0", T.FLOAT, [1], [0.0])]
    p = model(tmp_path, "m.onnx", [h.make_node("Loop", ["n", "t", "a0"], ["y"], body=body)], [], [y_out("y", [1])], inits)
    r = kiln("run", p, "--timeout", "1", timeout=60)
    assert r.returncode == 1 and "Cancelled" in r.stderr and "time limit" in r.stderr, r.stderr


I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def _shape_arith_case(case):
    """(nodes, inputs, initializers, what the error must say or None) of one shape-arithmetic case."""
    x4 = h.make_tensor_value_info("x", T.FLOAT, [1, 1, 2, 2])
    f = lambda name, vals: h.make_tensor(name, T.FLOAT, [], vals)  # noqa: E731
    i = lambda name, vals, dims=None: h.make_tensor(name, T.INT64, [len(vals)] if dims is None else dims, vals)  # noqa: E731
    if case == "reshape_shape_input_2^40":  # a shape input of 2^40 entries: inference leaves the rank unknown
        s = h.make_tensor_value_info("s", T.INT64, [1 << 40])
        return [h.make_node("Reshape", ["x", "s"], ["y"])], [X, s], [], None
    if case == "reshape_product_past_int64":
        return [h.make_node("Reshape", ["x", "s"], ["y"])], [X], [i("s", [2**62, 4])], "multiply past int64"
    if case == "range_nan":
        return [h.make_node("Range", ["a", "b", "c"], ["y"])], [], [f("a", [0]), f("b", [float("nan")]), f("c", [1])], "past 2^53"
    if case == "range_int64_extremes":
        return [h.make_node("Range", ["a", "b", "c"], ["y"])], [], [i("a", [I64_MIN], []), i("b", [I64_MAX], []), i("c", [1], [])], "Range"
    if case == "conv_dilation_2^62":
        x = h.make_tensor_value_info("x", T.FLOAT, [1, 1, 8])
        w = h.make_tensor("w", T.FLOAT, [1, 1, 3], [1, 1, 1])
        return [h.make_node("Conv", ["x", "w"], ["y"], dilations=[2**62])], [x], [w], "2^30"
    if case == "conv_transpose_stride_2^62":
        x = h.make_tensor_value_info("x", T.FLOAT, [1, 1, 8])
        w = h.make_tensor("w", T.FLOAT, [1, 1, 3], [1, 1, 1])
        return [h.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2**62])], [x], [w], "2^30"
    if case == "depth_to_space_blocksize_2^40":
        return [h.make_node("DepthToSpace", ["x"], ["y"], blocksize=1 << 40)], [x4], [], "blocksize"
    if case == "resize_scales_1e30":
        scales = h.make_tensor("sc", T.FLOAT, [4], [1, 1, 1e30, 1e30])
        return [h.make_node("Resize", ["x", "", "sc"], ["y"])], [x4], [scales], "not a finite count"
    if case == "pad_pads_int64_max":
        return [h.make_node("Pad", ["x", "p"], ["y"])], [X], [i("p", [0, I64_MAX, 0, I64_MAX])], "pads"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["reshape_shape_input_2^40", "reshape_product_past_int64", "range_nan",
                                  "range_int64_extremes", "conv_dilation_2^62", "conv_transpose_stride_2^62",
                                  "depth_to_space_blocksize_2^40", "resize_scales_1e30", "pad_pads_int64_max"])
def test_shape_arithmetic_past_int64_is_an_error(tmp_path, case):
    # Shape inference and the kernels multiply and add dims and attributes a model controls: past int64
    # (signed overflow, float-to-int of NaN or 1e30) each must be a clear error or an unknown dim, never
    # undefined behaviour (the sanitizer job runs these through the UBSan build) or a huge allocation.
    nodes, inputs, inits, want = _shape_arith_case(case)
    p = model(tmp_path, "m.onnx", nodes, inputs, [y_out()], inits)
    assert kiln("info", p).returncode in (0, 1)
    r = kiln("run", p, "--max-tensor-bytes", 1 << 30)
    assert r.returncode == 1, (case, r.stdout[-300:], r.stderr[-300:])
    if want:
        assert want in r.stderr, (case, r.stderr[-500:])


def test_int64_extremes_in_shape_vectors_and_pads(tmp_path):
    """fuzz_import (seed 1, 2026-11-26): a shape vector Concat-ed with INT64_MAX went through the
    optimizer's shape reading as a double (2^63, past int64 when cast back: undefined behaviour under
    UBSan). Constants are now read as integers, other double-to-int64 reads saturate, and a Pad of
    extreme size is not folded into a Conv. The build ends with an answer or an error, never a signal."""
    xi = h.make_tensor_value_info("x", T.FLOAT, ["N", 6])
    i64 = lambda name, v: h.make_tensor(name, T.INT64, [len(v)] if isinstance(v, list) else [], v if isinstance(v, list) else [v])  # noqa: E731
    p = model(tmp_path, "shape.onnx", [
        h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "i"], ["d"], axis=0),
        h.make_node("Unsqueeze", ["d", "ax"], ["u"]), h.make_node("Concat", ["u", "k"], ["t"], axis=0),
        h.make_node("Reshape", ["x", "t"], ["y"])],
        [xi], [y_out()], [i64("i", 0), i64("ax", [0]), i64("k", [2**63 - 1])])
    r = kiln("build", p, "-o", tmp_path / "shape.kiln", "--opt-level", "2")
    assert r.returncode in (0, 1), r.stderr
    xc = h.make_tensor_value_info("x", T.FLOAT, [1, 1, 4, 4])
    p2 = model(tmp_path, "pad.onnx", [
        h.make_node("Pad", ["x", "pads"], ["xp"]),
        h.make_node("Conv", ["xp", "w"], ["y"], kernel_shape=[1, 1])],
        [xc], [y_out()], [i64("pads", [0, 0, 2**63 - 1, 0, 0, 0, 0, 0]),
                          h.make_tensor("w", T.FLOAT, [1, 1, 1, 1], [1.0])])
    r = kiln("build", p2, "-o", tmp_path / "pad.kiln", "--opt-level", "2")
    assert r.returncode in (0, 1), r.stderr
    assert "Traceback" not in r.stderr


def test_batchnorm_parameters_of_two_sizes_are_an_error(tmp_path):
    """fuzz_import (seed 1, 2026-11-26): BatchNormalization whose scale had C x spatial entries (it was X
    itself) and whose mean had C: the kernel took the scale's size for all four and read past the mean.
    Every parameter must now have the scale's size, C or C x spatial."""
    xi = h.make_tensor_value_info("x", T.FLOAT, [1, 2, 3, 3])
    c = lambda name: h.make_tensor(name, T.FLOAT, [2], [0.5, 1.0])  # noqa: E731
    p = model(tmp_path, "bn.onnx", [h.make_node("BatchNormalization", ["x", "x", "b", "m", "v"], ["y"])],
              [xi], [y_out()], [c("b"), c("m"), c("v")])
    r = kiln("run", p)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "must have C = 2 entries" in r.stderr, r.stderr


@pytest.mark.parametrize("pos", [1e30, float("nan"), -1e30])
def test_rotary_position_ids_of_a_float_type_are_an_error(tmp_path, pos):
    """CI's seeded fuzz_model (2026-11-29): RotaryEmbedding whose position_ids had become float with a
    huge value; reading it as an int64 row index was a float-to-integer overflow (undefined behaviour).
    position_ids must be int64 (the spec's type), and any float read where an integer is expected now
    saturates (NaN reads as 0) before the kernels' range checks."""
    x = h.make_tensor_value_info("x", T.FLOAT, [1, 2, 4])
    angles = np.linspace(0, 3, 8 * 2, dtype=np.float32).reshape(8, 2)
    inits = [h.make_tensor("pos", T.FLOAT, [1, 2], [pos, 0.0]),
             h.make_tensor("cos", T.FLOAT, [8, 2], np.cos(angles).ravel()),
             h.make_tensor("sin", T.FLOAT, [8, 2], np.sin(angles).ravel())]
    node = h.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain="com.microsoft", num_heads=1)
    g = h.make_graph([node], "g", [x], [y_out()], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
    p = tmp_path / "rotary.onnx"
    p.write_bytes(m.SerializeToString())
    r = kiln("run", p)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "position_ids" in r.stderr, r.stderr
