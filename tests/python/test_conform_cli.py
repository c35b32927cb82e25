"""`kiln conform`: onnx-style test folders run through the kiln command (how the node suite runs on
a GPU machine), checked here on the CPU against onnx's own node test data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import onnx
import onnx.backend.test
from onnx import numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILN = os.path.join(REPO, "build", "kiln")
NODE = os.path.join(os.path.dirname(onnx.backend.test.__file__), "data", "node")


def conform(*args, tmp_path) -> tuple[int, dict, str]:
    out = tmp_path / "results.jsonl"
    r = subprocess.run([KILN, "conform", *map(str, args), "--json", str(out)], capture_output=True, text=True, timeout=300)
    rows = {}
    if out.exists():
        for line in out.read_text().splitlines():
            row = json.loads(line)
            rows[row["name"]] = row
    return r.returncode, rows, r.stdout + r.stderr


def test_outcomes(tmp_path):
    # A broken copy of test_relu: its expected output is negated, so kiln's output must not match.
    broken = tmp_path / "suite" / "test_relu_broken"
    shutil.copytree(os.path.join(NODE, "test_relu"), broken)
    pb = broken / "test_data_set_0" / "output_0.pb"
    t = onnx.load_tensor(str(pb))
    arr = numpy_helper.to_array(t)
    bad = numpy_helper.from_array(-arr - 1, t.name)
    pb.write_bytes(bad.SerializeToString())
    for name in ("test_relu", "test_add_bcast", "test_cast_FLOAT_to_FLOAT16", "test_sequence_insert_at_back"):
        shutil.copytree(os.path.join(NODE, name), tmp_path / "suite" / name)
    code, rows, text = conform(tmp_path / "suite", "-v", tmp_path=tmp_path)
    assert code == 2, text  # something failed
    assert rows["test_relu"]["outcome"] == "pass", rows["test_relu"]
    assert rows["test_add_bcast"]["outcome"] == "pass", rows["test_add_bcast"]
    assert rows["test_cast_FLOAT_to_FLOAT16"]["outcome"] == "pass", rows["test_cast_FLOAT_to_FLOAT16"]
    assert rows["test_relu_broken"]["outcome"] == "fail"
    assert "elements differ" in rows["test_relu_broken"]["message"]
    # Sequence inputs are not TensorProto files: reported as an error, not a crash.
    assert rows["test_sequence_insert_at_back"]["outcome"] == "error"
    assert "5 tests" in text


def test_single_folder_and_filter(tmp_path):
    code, rows, text = conform(os.path.join(NODE, "test_relu"), tmp_path=tmp_path)
    assert code == 0, text
    assert list(rows) == ["test_relu"] and rows["test_relu"]["outcome"] == "pass"
    code, rows, text = conform(NODE, "--filter", "^test_(abs|neg)$", tmp_path=tmp_path)
    assert code == 0, text
    assert sorted(rows) == ["test_abs", "test_neg"]


def test_missing_path_is_an_error(tmp_path):
    code, _, text = conform(tmp_path / "nothing_here", tmp_path=tmp_path)
    assert code != 0 and "neither a test folder" in text


def test_tolerance_options(tmp_path):
    # Relu is exact: it passes with no tolerance at all.
    code, rows, text = conform(os.path.join(NODE, "test_relu"), "--rtol", "0", "--atol", "0", tmp_path=tmp_path)
    assert code == 0 and rows["test_relu"]["outcome"] == "pass", text
