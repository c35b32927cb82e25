"""Issue #47's reliability defects, one regression each: IOBinding never writes into read-only or
copied memory, a terminate request made while a run converts its inputs stops that run, special
files (FIFOs, devices, directories, sockets) are refused at once by the command and the API, a
batch of 0 flows through a convolution, a context under shape churn reaches a steady state, and a
model followed by junk is refused at once naming the offset; plus the 16-thread soak over one
session (mixed batch sizes, IOBinding). Anything that could hang or crash the test process before
its fix, or whose memory is measured, runs in a child process with a time limit."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import kiln

from test_hostile import kiln as kiln_cli
from test_run_options import endless_loop_model

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def add_one_model() -> bytes:
    """y = x + 1, x float [1, 4]."""
    g = h.make_graph([h.make_node("Add", ["x", "one"], ["y"])], "add_one", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 4])], [h.make_tensor("one", T.FLOAT, [], [1.0])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


def run_child(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter importing the same kiln; a hang is a test failure, not a stuck suite."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(kiln.__file__)),
                                                       os.path.dirname(os.path.abspath(__file__)),
                                                       os.environ.get("PYTHONPATH", "")]))
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the child process hung (over {timeout} s)")


# ---- 1 and 2: IOBinding outputs go only where the caller may write and will see them


@pytest.fixture(scope="module")
def add_session():
    return kiln.InferenceSession(add_one_model())


def bound_run(sess, out_tensor):
    binding = sess.io_binding()
    binding.bind_cpu_input("x", np.arange(4, dtype=np.float32).reshape(1, 4))
    binding.bind_ortvalue_output("y", out_tensor)
    sess.run_with_iobinding(binding)


def test_output_bound_to_a_read_only_array_is_refused_and_left_unchanged(add_session):
    a = np.zeros((1, 4), np.float32)
    a.flags.writeable = False
    with pytest.raises(kiln.InvalidArgument, match="output 'y' is bound to a read-only array"):
        bound_run(add_session, kiln.OrtValue.ortvalue_from_numpy(a))
    assert not a.any()


def test_output_bound_to_an_array_over_bytes_is_refused_and_the_bytes_unchanged(add_session):
    data = bytes(16)
    a = np.frombuffer(data, np.float32).reshape(1, 4)
    with pytest.raises(kiln.InvalidArgument, match="read-only array"):
        bound_run(add_session, kiln.Tensor.from_numpy(a))
    assert data == bytes(16)


@pytest.mark.parametrize("how", ["tensor", "buffer_ptr"])
def test_output_bound_to_a_read_only_mmap_is_refused_not_a_segfault(tmp_path, how):
    # Before the fix the run wrote through the read-only mapping: SIGSEGV (so in a child process).
    path = tmp_path / "zeros.bin"
    path.write_bytes(bytes(16))
    bind = ('binding.bind_ortvalue_output("y", kiln.Tensor.from_numpy(a))' if how == "tensor" else
            'binding.bind_output("y", "cpu", 0, np.float32, [1, 4], a.ctypes.data)')
    r = run_child(f"""
        import mmap, numpy as np, kiln
        from test_reliability import add_one_model
        sess = kiln.InferenceSession(add_one_model())
        with open({str(path)!r}, "rb") as f:
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        a = np.frombuffer(m, np.float32).reshape(1, 4)
        binding = sess.io_binding()
        binding.bind_cpu_input("x", np.ones((1, 4), np.float32))
        try:
            {bind}
            sess.run_with_iobinding(binding)
        except kiln.InvalidArgument as e:
            print("refused:", e)
        """)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-800:]}"
    assert "refused:" in r.stdout and "read-only" in r.stdout, r.stdout + r.stderr
    assert path.read_bytes() == bytes(16)


@pytest.mark.parametrize("make", [lambda: np.zeros((1, 8), np.float32)[:, ::2], lambda: np.zeros((4, 1), np.float32).T,
                                  lambda: np.zeros((1, 4), np.dtype(">f4"))],
                         ids=["strided", "transposed", "big-endian"])
def test_output_bound_to_an_array_kiln_would_copy_is_refused_not_silently_ignored(add_session, make):
    a = make()
    assert a.shape == (1, 4)
    if a.flags.c_contiguous and a.dtype.isnative:
        pytest.skip("numpy made this array contiguous")
    with pytest.raises(kiln.InvalidArgument, match="a copy of the array"):
        bound_run(add_session, kiln.Tensor.from_numpy(a))


def test_output_bound_to_a_writable_contiguous_array_is_still_written_in_place(add_session):
    a = np.zeros((1, 4), np.float32)
    bound_run(add_session, kiln.Tensor.from_numpy(a))
    np.testing.assert_array_equal(a, [[1, 2, 3, 4]])


def test_read_only_arrays_stay_fine_as_inputs(add_session):
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    x.flags.writeable = False
    binding = add_session.io_binding()
    binding.bind_ortvalue_input("x", kiln.Tensor.from_numpy(x))
    binding.bind_output("y")
    add_session.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], x + 1)


# ---- 3: a terminate request made while the inputs are converted stops that run


class SlowArray:
    """An input whose conversion runs Python code (as pandas/xarray objects do)."""

    def __init__(self, value, during):
        self.value, self.during = value, during

    def __array__(self, dtype=None, copy=None):
        self.during()
        return np.asarray(self.value, dtype=dtype)


@pytest.fixture(scope="module")
def loop_session():
    return kiln.InferenceSession(endless_loop_model(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("where", ["same thread", "another thread"])
def test_terminate_while_the_inputs_are_converted_stops_the_run(loop_session, where):
    opts = kiln.RunOptions()
    opts.run_timeout_s = 30  # a bound on the test only: the run must stop long before, for terminate
    if where == "same thread":
        during = lambda: setattr(opts, "terminate", True)  # noqa: E731
    else:
        def during():
            threading.Timer(0.1, lambda: setattr(opts, "terminate", True)).start()
            time.sleep(0.5)
    n = SlowArray(np.array(2**62, dtype=np.int64), during)
    t0 = time.monotonic()
    with pytest.raises(kiln.Cancelled, match="terminate"):
        loop_session.run(None, {"n": n}, opts)
    assert time.monotonic() - t0 < 10
    opts.terminate = False  # cleared by the caller, the options run again
    (y,) = loop_session.run(None, {"n": np.array(3, dtype=np.int64)}, opts)
    np.testing.assert_array_equal(y, [3.0])


def test_terminate_set_during_a_run_is_not_cleared_by_the_run(loop_session):
    opts = kiln.RunOptions()
    opts.run_timeout_s = 30
    threading.Timer(0.2, lambda: setattr(opts, "terminate", True)).start()
    with pytest.raises(kiln.Cancelled, match="terminate"):
        loop_session.run_with_ort_values(None, {"n": np.array(2**62, dtype=np.int64)}, opts)
    assert opts.terminate  # only the caller clears it


# ---- 4: special files are refused at once, never waited on


@pytest.fixture()
def specials(tmp_path):
    """A FIFO, a socket, a directory and a character device, by kind."""
    fifo = tmp_path / "model.fifo"
    os.mkfifo(fifo)
    short = tempfile.mkdtemp(prefix="kiln")  # a socket path must be short
    sock_path = os.path.join(short, "s.onnx")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(sock_path)
    folder = tmp_path / "folder.onnx"
    folder.mkdir()
    yield {"FIFO": str(fifo), "socket": sock_path, "directory": str(folder), "character device": "/dev/zero"}
    sock.close()
    os.unlink(sock_path)
    os.rmdir(short)


@pytest.mark.parametrize("kind", ["FIFO", "socket", "directory", "character device"])
@pytest.mark.parametrize("cmd", ["info", "build", "run"])
def test_cli_refuses_a_model_that_is_not_a_regular_file(tmp_path, specials, kind, cmd):
    path = specials[kind]
    args = [cmd, path] + (["-o", tmp_path / "m.kiln"] if cmd == "build" else [])
    t0 = time.monotonic()
    try:
        r = kiln_cli(*args, timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail(f"kiln {cmd} waited on the {kind}")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert kind in r.stderr and path in r.stderr, r.stderr
    assert time.monotonic() - t0 < 15


@pytest.mark.parametrize("kind", ["FIFO", "socket", "character device"])
def test_cli_build_refuses_an_output_that_is_not_a_regular_file_before_building(tmp_path, specials, kind):
    src = tmp_path / "m.onnx"
    src.write_bytes(add_one_model())
    try:
        r = kiln_cli("build", src, "-o", specials[kind], timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail(f"kiln build -o waited on the {kind}")
    assert r.returncode == 1 and kind in r.stderr and "engine file" in r.stderr, r.stderr
    assert "placement:" not in r.stdout  # refused before the build, not after it


def test_cli_build_refuses_a_timing_cache_and_calibration_file_that_are_fifos(tmp_path):
    src = tmp_path / "m.onnx"
    src.write_bytes(add_one_model())
    fifo = tmp_path / "cache.fifo"
    os.mkfifo(fifo)
    calib = tmp_path / "calib"
    calib.mkdir()
    os.mkfifo(calib / "0.npy")
    for extra, want in [(["--timing-cache", fifo, "--tune"], "timing cache"), (["--int8", "--calibration", calib], ".npy file"),
                        (["--int8", "--calibration-cache", fifo], "calibration cache")]:
        try:
            r = kiln_cli("build", src, "-o", tmp_path / "m.kiln", *extra, timeout=15)
        except subprocess.TimeoutExpired:
            pytest.fail(f"kiln build {extra} waited on a FIFO")
        assert r.returncode == 1 and "FIFO" in r.stderr and want in r.stderr, (extra, r.stderr)


@pytest.mark.parametrize("call", ["kiln.InferenceSession(p)", "kiln.Engine.load(p)", "kiln.Engine.build(p)",
                                  "kiln.summarize_model(p)"])
def test_python_api_refuses_a_fifo_at_once(tmp_path, call):
    fifo = tmp_path / "m.onnx"
    os.mkfifo(fifo)
    r = run_child(f"""
        import kiln
        p = {str(fifo)!r}
        try:
            {call}
        except kiln.KilnError as e:
            print("refused:", e)
        """, timeout=20)
    assert r.returncode == 0, r.stderr[-800:]
    assert "refused:" in r.stdout and ("FIFO" in r.stdout or "not a regular file" in r.stdout), r.stdout


# ---- 6: a batch of 0 flows through a convolution


def conv_model(batch) -> bytes:
    rng = np.random.default_rng(0)
    w = h.make_tensor("w", T.FLOAT, [4, 3, 3, 3], rng.standard_normal(108).astype(np.float32).tolist())
    b = h.make_tensor("b", T.FLOAT, [4], [0.1, 0.2, 0.3, 0.4])
    g = h.make_graph([h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["y"])],
                     "conv", [h.make_tensor_value_info("x", T.FLOAT, [batch, 3, 8, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, [batch, 4, 8, 8])], [w, b])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("level", [kiln.GraphOptimizationLevel.ORT_DISABLE_ALL, kiln.GraphOptimizationLevel.ORT_ENABLE_ALL])
def test_a_batch_of_zero_gives_an_empty_output_of_the_right_shape(level):
    opts = kiln.SessionOptions()
    opts.graph_optimization_level = level
    sess = kiln.InferenceSession(conv_model("N"), opts)
    (y,) = sess.run(None, {"x": np.zeros((0, 3, 8, 8), np.float32)})
    assert y.shape == (0, 4, 8, 8) and y.dtype == np.float32
    # The same context keeps running real batches afterwards.
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    (y2,) = sess.run(None, {"x": x})
    (want,) = kiln.InferenceSession(conv_model("N"), opts).run(None, {"x": x})
    np.testing.assert_allclose(y2, want, rtol=1e-5, atol=1e-5)
    assert y2.shape == (2, 4, 8, 8)


# ---- The 16-thread soak: mixed batch sizes, run() and IOBinding on one session


def test_sixteen_threads_mixed_batches_and_iobinding_are_bit_exact():
    """16 threads share one session for 24 runs each, cycling batch sizes 1, 3, 8 and 5 and four ways
    of running: run(), run_with_ort_values(), IOBinding into a kiln-allocated output, and IOBinding
    into the thread's own NumPy array (written in place). Every output equals the single-threaded
    result for its batch, bit for bit; the session's contexts are reused, so plans and arenas are
    shared across threads over time, never at once. Bounded: about 1-2 s on 2 cores."""
    sess = kiln.InferenceSession(dynamic_conv_model())
    rng = np.random.default_rng(3)
    xs = {b: rng.standard_normal((b, 3, 12, 10)).astype(np.float32) for b in (1, 3, 8, 5)}
    want = {b: sess.run(None, {"x": x})[0] for b, x in xs.items()}
    batches = list(xs)
    failures: list[str] = []

    def work(t: int) -> None:
        try:
            own = {b: np.empty((b, 8, 12, 10), np.float32) for b in batches}
            for i in range(24):
                b = batches[(t + i) % len(batches)]
                x = xs[b]
                how = (t + i // len(batches)) % 4
                if how == 0:
                    (y,) = sess.run(None, {"x": x})
                elif how == 1:
                    y = sess.run_with_ort_values(None, {"x": kiln.Tensor.from_numpy(x)})[0].numpy()
                else:
                    binding = sess.io_binding()
                    binding.bind_cpu_input("x", x)
                    if how == 2:
                        binding.bind_output("y")
                    else:
                        own[b].fill(np.nan)
                        binding.bind_ortvalue_output("y", kiln.Tensor.from_numpy(own[b]))
                    sess.run_with_iobinding(binding)
                    y = binding.copy_outputs_to_cpu()[0]
                    if how == 3 and not np.array_equal(own[b], want[b]):
                        failures.append(f"thread {t} run {i}: the bound array was not written (batch {b})")
                if y.shape != want[b].shape or not np.array_equal(y, want[b]):
                    failures.append(f"thread {t} run {i} ({['run', 'ort values', 'iobinding', 'bound array'][how]}, "
                                    f"batch {b}): output differs")
        except Exception as e:  # noqa: BLE001 — reported below with the thread
            failures.append(f"thread {t}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(16)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not failures, failures[:5]
    assert time.time() - t0 < 30


# ---- 7: a context under shape churn reaches a steady state


def rss_mb() -> float:
    """This process's resident memory in MB (/proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def dynamic_conv_model() -> bytes:
    """Two 3x3 convolutions over x [N, 3, H, W], every dim dynamic: each (N, H, W) is a new signature."""
    rng = np.random.default_rng(0)
    w1 = h.make_tensor("w1", T.FLOAT, [8, 3, 3, 3], rng.standard_normal(216).astype(np.float32).tolist())
    w2 = h.make_tensor("w2", T.FLOAT, [8, 8, 3, 3], rng.standard_normal(576).astype(np.float32).tolist())
    g = h.make_graph([h.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c1"], ["r1"]),
                      h.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]), h.make_node("Sigmoid", ["c2"], ["y"])],
                     "dyn", [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, "H", "W"])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["N", 8, "H", "W"])], [w1, w2])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]).SerializeToString()


def dynamic_session_child(tmp_path, code: str, timeout: float) -> subprocess.CompletedProcess:
    """`code` in a child process that has `sess`, a one-thread session of dynamic_conv_model() built
    from `path` with `opts`, numpy as np, kiln and rss_mb."""
    path = tmp_path / "dyn.onnx"
    path.write_bytes(dynamic_conv_model())
    return run_child(textwrap.dedent(f"""
        import numpy as np
        import kiln
        from test_reliability import rss_mb

        path = {str(path)!r}
        opts = kiln.SessionOptions()
        opts.intra_op_num_threads = 1
        sess = kiln.InferenceSession(path, opts)
        """) + textwrap.dedent(code), timeout=timeout)


def test_rss_plateaus_over_many_input_shapes(tmp_path):
    """300 distinct input shapes through one session: after a warm-up over 150 of them (the largest
    among them), the other 150 grow the process by a bounded amount: the context keeps at most 16
    plans and gives the rest's memory back, and oneDNN's primitive cache (a JIT-compiled primitive
    per convolution and shape) is bounded too. The outputs stay right throughout."""
    r = dynamic_session_child(tmp_path, """
        # 300 distinct (N, H, W); the largest, (2, 27, 22), comes first.
        shapes = [(1 + i % 2, 8 + i % 20, 8 + i // 20) for i in range(300)]
        shapes.insert(0, shapes.pop())
        rng = np.random.default_rng(0)
        for i, (n, hh, ww) in enumerate(shapes):
            x = rng.standard_normal((n, 3, hh, ww)).astype(np.float32)
            (y,) = sess.run(None, {"x": x})
            if i % 50 == 7:  # the outputs stay right while plans come and go
                (want,) = kiln.InferenceSession(path, opts).run(None, {"x": x})
                assert np.array_equal(y, want), i
            if i == 149:
                warm = rss_mb()
        print("rss", round(warm, 1), round(rss_mb(), 1))
        """, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    warm, end = map(float, r.stdout.split("rss")[1].split())
    # Measured over the last 150 shapes (2 cores, 2026-11-29): 21.4 MB before the bounds (oneDNN's
    # cache of 1024 primitives filling), about 3 MB with them.
    assert end - warm < 8, f"RSS grew from {warm:.1f} to {end:.1f} MB over 150 new input shapes"


def test_an_evicted_signatures_arena_goes_back_to_the_system(tmp_path):
    """One large signature (a ~20 MB arena), then 20 small ones: its plan is evicted and the arena
    shrinks to what the small ones need, the memory returned (RSS falls back), where before the arena
    stayed at the largest signature ever seen."""
    r = dynamic_session_child(tmp_path, """
        sess.run(None, {"x": np.ones((1, 3, 8, 8), np.float32)})
        small = rss_mb()
        sess.run(None, {"x": np.ones((32, 3, 96, 96), np.float32)})
        big = rss_mb()
        for w in range(8, 28):
            sess.run(None, {"x": np.ones((1, 3, 8, w), np.float32)})
        print("rss", small, big, rss_mb())
        """, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    small, big, after = map(float, r.stdout.split("rss")[1].split())
    # Measured: 63.2 -> 81.6 -> 66.7 MB (before: 209.4 -> 227.7 -> 230.8).
    assert big - small > 10, r.stdout
    assert after - small < (big - small) / 2, f"RSS {small:.1f} MB, {big:.1f} with the large signature, {after:.1f} after it was evicted"


def test_max_shape_plans_session_option():
    opts = kiln.SessionOptions()
    opts.add_session_config_entry("kiln.max_shape_plans", "3")
    with pytest.raises(ValueError, match="max_shape_plans"):
        opts.add_session_config_entry("kiln.max_shape_plans", "-1")
    sess = kiln.InferenceSession(dynamic_conv_model(), opts)
    for hh in range(8, 14):
        sess.run(None, {"x": np.ones((1, 3, hh, 8), np.float32)})
    ctx = sess._acquire()
    try:
        assert ctx.max_shape_plans == 3 and ctx.planned_signatures == 3
        ctx.max_shape_plans = 1
        assert ctx.planned_signatures == 1
    finally:
        sess._release(ctx)


# ---- 8: a model followed by junk is refused at once, naming the offset, without reading it all


def test_model_followed_by_2gb_of_zeros_is_refused_at_once_naming_the_offset(tmp_path):
    """A valid model padded to just under protobuf's 2 GiB limit with zeros (a sparse file: no disk):
    refused within seconds, the process staying small, the error naming the byte where the model
    ends (where the zeros begin)."""
    model = add_one_model()
    path = tmp_path / "padded.onnx"
    path.write_bytes(model)
    os.truncate(path, 2**31 - 2**20)
    # The peak is this process's VmHWM (ru_maxrss would count the forking parent's pages too).
    r = run_child(f"""
        import time
        import kiln
        t0 = time.time()
        try:
            kiln.InferenceSession({str(path)!r})
            print("loaded")
        except kiln.KilnError as e:
            print("refused:", e)
        took = time.time() - t0
        with open("/proc/self/status") as f:
            hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
        print("took", took, "maxrss_mb", hwm / 1024)
        """, timeout=60)
    assert r.returncode == 0, r.stderr[-800:]
    assert "refused:" in r.stdout, r.stdout
    assert f"at byte {len(model)}" in r.stdout and "zero byte" in r.stdout, r.stdout
    took, rss = float(r.stdout.split("took")[1].split()[0]), float(r.stdout.split("maxrss_mb")[1].split()[0])
    # Before: 17 s and 2.1 GB (the whole file read into memory, hashed, then parsed).
    assert took < 5, r.stdout
    assert rss < 600, r.stdout
