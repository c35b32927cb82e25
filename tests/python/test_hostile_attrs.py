"""Tiny models with hostile attribute values through the `kiln` command (issues #48 and #49): each
must end with a clear error (exit 1, the cause named) or a result, within a small time and memory
bound — never run for minutes, take gigabytes, or die of a signal. The four models are #48's."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest
from onnx import TensorProto as T
from onnx import helper as h

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# KILN_CLI: another build of the command (scripts/sanitize.sh runs these through the sanitized one).
KILN = os.environ.get("KILN_CLI") or os.path.join(REPO, "build", "kiln")

SECONDS = 5.0  # #48's bound: every case ends within 5 s ...
MAX_RSS_KB = 1 << 20  # ... and under 1 GB of resident memory
INT64_MAX = 2**63 - 1


class Result:
    def __init__(self, returncode, stdout, stderr, seconds, max_rss_kb):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr
        self.seconds, self.max_rss_kb = seconds, max_rss_kb


def kiln_bounded(*args, timeout=60) -> Result:
    """Runs `kiln`, measuring its wall time and peak RSS (from wait4, this child alone)."""
    t0 = time.monotonic()
    p = subprocess.Popen([KILN, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = {}
    readers = [threading.Thread(target=lambda k=k, f=f: out.__setitem__(k, f.read()))
               for k, f in (("stdout", p.stdout), ("stderr", p.stderr))]
    for t in readers:
        t.start()
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - t0 > timeout:
            p.kill()
            _, status, usage = os.wait4(p.pid, 0)
            break
        time.sleep(0.02)
    seconds = time.monotonic() - t0
    for t in readers:
        t.join()
    p.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    r = Result(p.returncode, out.get("stdout", ""), out.get("stderr", ""), seconds, usage.ru_maxrss)
    assert r.returncode >= 0, f"kiln {args[0]} died of signal {-r.returncode}: {r.stderr[-500:]}"
    return r


def assert_bounded(r: Result):
    assert r.seconds < SECONDS, f"took {r.seconds:.1f} s: {r.stderr[-500:]}"
    assert r.max_rss_kb < MAX_RSS_KB, f"peak RSS {r.max_rss_kb} kB: {r.stderr[-500:]}"


def model(tmp_path, nodes, inputs, outputs, inits=(), opset=17):
    g = h.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())  # no checker: these models are wrong on purpose
    return path


def f32(name, shape):
    return h.make_tensor_value_info(name, T.FLOAT, shape)


def test_legacy_broadcast_axis_out_of_range(tmp_path):
    # Ran 40 s+ at 8.5 GB: axis + rank overflowed and the kernel pushed back dims until memory ran out.
    node = h.make_node("Add", ["a", "b"], ["y"], broadcast=1, axis=INT64_MAX)
    p = model(tmp_path, [node], [f32("a", [2, 3]), f32("b", [3])], [f32("y", None)], opset=6)
    r = kiln_bounded("run", p)
    assert r.returncode == 1 and "out of range" in r.stderr and "(Add)" in r.stderr, r.stderr
    assert_bounded(r)


def test_split_num_outputs_unlike_the_outputs(tmp_path):
    # 20 s and 8.5 GB, then an error: equal_split_sizes resized to 2^30 before anything was checked.
    node = h.make_node("Split", ["x"], ["y0", "y1", "y2"], num_outputs=1 << 30)
    p = model(tmp_path, [node], [f32("x", [6])], [f32(f"y{i}", None) for i in range(3)], opset=18)
    r = kiln_bounded("run", p)
    assert r.returncode == 1 and "num_outputs" in r.stderr and "(Split)" in r.stderr, r.stderr
    assert_bounded(r)


def test_tfidf_skip_count_larger_than_the_row(tmp_path):
    # Never finished: the skip loop ran to max_skip_count. A skip larger than the row is the row.
    node = h.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=2, max_gram_length=2,
                       max_skip_count=2**31, ngram_counts=[0, 0], ngram_indexes=[0], pool_int64s=[0, 1])
    x = h.make_tensor_value_info("x", T.INT64, [2, 6])
    p = model(tmp_path, [node], [x], [f32("y", None)], opset=9)
    r = kiln_bounded("run", p, "--output-dir", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert_bounded(r)


def test_cli_does_not_invent_a_huge_random_input(tmp_path):
    # [N, 2^30] float32 with N dynamic (1): 4 GiB of random data was made up and reduced for 40 s+.
    node = h.make_node("ReduceSum", ["x", "axes"], ["y"])
    axes = h.make_tensor("axes", T.INT64, [1], [1])
    p = model(tmp_path, [node], [f32("x", ["", 1 << 30])], [f32("y", None)], [axes], opset=17)
    r = kiln_bounded("run", p)
    assert r.returncode == 1, r.stderr
    assert "'x'" in r.stderr and "[1,1073741824]" in r.stderr and "--input" in r.stderr, r.stderr
    assert_bounded(r)


@pytest.mark.parametrize("case", ["pad_empty", "center_crop_pad_empty", "reduce_empty", "dropout_byte"])
def test_49_buckets_end_cleanly(tmp_path, case):
    # One minimal model per allocation bucket of #49 that the command can reach: an empty input padded
    # or cropped to a 2^40-long axis, reduced over one, and Dropout's training_mode as a byte of 2.
    big = 1 << 40
    if case == "pad_empty":
        nodes = [h.make_node("Pad", ["x", "pads"], ["y"])]
        inits = [h.make_tensor("pads", T.INT64, [4], [0, 0, 0, big])]
        x = f32("x", [0, 3])
    elif case == "center_crop_pad_empty":
        nodes = [h.make_node("CenterCropPad", ["x", "shape"], ["y"])]
        inits = [h.make_tensor("shape", T.INT64, [2], [0, big])]
        x = f32("x", [0, 3])
    elif case == "reduce_empty":
        nodes = [h.make_node("Expand", ["x", "shape"], ["e"]), h.make_node("ReduceSum", ["e", "axes"], ["y"])]
        inits = [h.make_tensor("shape", T.INT64, [2], [0, big]), h.make_tensor("axes", T.INT64, [1], [1])]
        x = f32("x", [1, 1])
    else:
        nodes = [h.make_node("Dropout", ["x", "ratio", "training"], ["y"])]
        training = h.make_tensor("training", T.BOOL, [], [True])
        training.raw_data = bytes([2])  # a byte that is not 0 or 1: true
        del training.int32_data[:]
        inits = [h.make_tensor("ratio", T.FLOAT, [], [1.5]), training]
        x = f32("x", [4])
    p = model(tmp_path, nodes, [x], [f32("y", None)], inits, opset=18)
    r = kiln_bounded("run", p, "--output-dir", tmp_path / "out")
    if case == "dropout_byte":
        assert r.returncode == 1 and "ratio" in r.stderr, r.stderr
    else:
        assert r.returncode == 0, r.stderr
    assert_bounded(r)


@pytest.mark.parametrize("attr,value", [("strides", [0, 1]), ("dilations", [1, -1]), ("pads", [0, 0, -1, 0])])
def test_col2im_attributes_checked_at_import(tmp_path, attr, value):
    # tools/attr_sweep.py: strides [0, 1] died of SIGFPE (the block count divided by the stride).
    node = h.make_node("Col2Im", ["x", "image_shape", "block_shape"], ["y"], **{attr: value})
    inits = [h.make_tensor("image_shape", T.INT64, [2], [5, 5]), h.make_tensor("block_shape", T.INT64, [2], [1, 5])]
    p = model(tmp_path, [node], [f32("x", [1, 5, 5])], [f32("y", None)], inits, opset=18)
    r = kiln_bounded("run", p)
    assert r.returncode == 1 and f"'{attr}'" in r.stderr and "(Col2Im)" in r.stderr, r.stderr
    assert_bounded(r)


def test_col2im_huge_image_shape_is_an_error(tmp_path):
    # image_shape + pads overflowed int64 in the block count (undefined behaviour) before any check.
    node = h.make_node("Col2Im", ["x", "image_shape", "block_shape"], ["y"], pads=[0, 0, INT64_MAX, 0])
    inits = [h.make_tensor("image_shape", T.INT64, [2], [5, 5]), h.make_tensor("block_shape", T.INT64, [2], [1, 5])]
    p = model(tmp_path, [node], [f32("x", [1, 5, 5])], [f32("y", None)], inits, opset=18)
    r = kiln_bounded("run", p)
    assert r.returncode == 1, r.stderr
    assert_bounded(r)
