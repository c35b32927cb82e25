#!/usr/bin/env python3
"""Writes fuzz_model's seeds (at job time, not committed): every model of onnx's node tests (the
installed onnx package's backend/test/data/node/*/model.onnx) with its test_data_set_0 inputs stored
as initializers named as the graph inputs, which the fuzz target takes out again and feeds (so the
mutator changes the runs' data too). Models above --max-bytes with their data are written without
the data (the target then generates it); ones above it without data are left out.

    .venv/bin/python tests/fuzz/make_model_seeds.py OUT_DIR [--max-bytes 65536]
"""

import argparse
import glob
import hashlib
import os

import onnx
from onnx import numpy_helper


def node_test_dir():
    import onnx.backend.test as backend_test
    return os.path.join(os.path.dirname(backend_test.__file__), "data", "node")


def with_feeds(model, case_dir):
    """The model with its first data set's tensor inputs as initializers of the inputs' names."""
    names = [v.name for v in model.graph.input if v.type.HasField("tensor_type")]
    files = sorted(glob.glob(os.path.join(case_dir, "test_data_set_0", "input_*.pb")),
                   key=lambda p: int(os.path.basename(p)[6:-3]))
    fed = onnx.ModelProto()
    fed.CopyFrom(model)
    taken = {t.name for t in fed.graph.initializer}
    all_inputs = [v.name for v in model.graph.input]
    for path in files:
        index = int(os.path.basename(path)[6:-3])
        if index >= len(all_inputs) or all_inputs[index] not in names or all_inputs[index] in taken:
            continue
        tensor = onnx.TensorProto()
        try:
            with open(path, "rb") as f:
                tensor.ParseFromString(f.read())
            numpy_helper.to_array(tensor)  # a sequence or optional parses as a (wrong) tensor; refuse it here
        except Exception:
            continue
        tensor.name = all_inputs[index]
        fed.graph.initializer.append(tensor)
    return fed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--max-bytes", type=int, default=65536, help="largest seed (the fuzzer's -max_len)")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    written = with_data = 0
    seen = set()
    for case_dir in sorted(glob.glob(os.path.join(node_test_dir(), "test_*"))):
        path = os.path.join(case_dir, "model.onnx")
        if not os.path.exists(path):
            continue
        model = onnx.load(path, load_external_data=False)
        data = with_feeds(model, case_dir).SerializeToString()
        has_data = True
        if len(data) > args.max_bytes:
            data, has_data = model.SerializeToString(), False
        if len(data) > args.max_bytes:
            continue
        digest = hashlib.sha1(data).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        with open(os.path.join(args.out_dir, os.path.basename(case_dir) + ".onnx"), "wb") as f:
            f.write(data)
        written += 1
        with_data += has_data
    print(f"make_model_seeds: {written} seeds ({with_data} with their test data) in {args.out_dir}")


if __name__ == "__main__":
    main()
