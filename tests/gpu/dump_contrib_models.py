"""Writes the com.microsoft contrib-op models of tests/python/test_contrib_ops.py (and the tiny
transformers optimized by onnxruntime's transformer optimizer) with their inputs as .npy, so a GPU
machine without kiln's Python package can run them through `kiln compare` on CUDA against the CPU:
  python3 tests/gpu/dump_contrib_models.py OUT_DIR   (then tests/gpu/contrib_cuda_check.sh runs them)
Each test's `check` is replaced by one that saves the model instead of running it; the tests' own
assertions on kiln's results are not run here."""
import os
import sys

import numpy as np
import onnx
import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
out = os.path.abspath(sys.argv[1])
os.makedirs(out, exist_ok=True)
count = [0]


def save(m, feeds, name):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    onnx.save(m, os.path.join(d, "model.onnx"))
    for k, v in feeds.items():
        np.save(os.path.join(d, k + ".npy"), v)
    count[0] += 1


class Dump:
    def pytest_runtest_call(self, item):
        mod = item.module
        name = item.name.replace("[", "_").replace("]", "").replace("/", "_").replace("-", "_")

        def check(m, feeds, rtol=1e-5, atol=1e-5, want=None):
            if want is None:  # outputs onnxruntime cannot give are not compared here
                save(m, feeds, name)
            pytest.skip("dumped")
        mod.check = check


sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
pytest.main(["-q", "-p", "no:cacheprovider", os.path.join(ROOT, "tests", "python", "test_contrib_ops.py"),
             "-k", "not transformers_optimized"], plugins=[Dump()])

from onnxruntime.transformers import optimizer  # noqa: E402

import test_contrib_ops as t  # noqa: E402

rng = np.random.default_rng(7)
for name, (model_type, _, _) in sorted(t.ORT_OPTIMIZED.items()):
    src = os.path.join(ROOT, "tests", "models", "attention", name + ".onnx")
    opt = optimizer.optimize_model(src, model_type=model_type, num_heads=4, hidden_size=64, opt_level=0, use_gpu=False)
    if name == "vit_timm":
        feeds = {"x": rng.standard_normal((2, 3, 32, 32)).astype(np.float32)}
    else:
        mask = np.ones((2, 12), np.int64)
        mask[1, 8:] = 0
        feeds = {"input_ids": rng.integers(0, 128, (2, 12)).astype(np.int64), "attention_mask": mask}
    save(opt.model, feeds, "ort_optimized_" + name)
print(f"{count[0]} models written to {out}")
