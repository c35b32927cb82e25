"""A model's graph without its weight data, to look at an export's structure on another machine:
every initializer larger than --keep elements becomes a float/int tensor of the same dtype and dims
whose values are drawn at random when the model is restored (--restore).

    python3 tools/strip_weights.py model.onnx small.onnx           # strip (dims kept in doc_string)
    python3 tools/strip_weights.py small.onnx model.onnx --restore  # random weights of those dims
"""
from __future__ import annotations

import argparse
import json

import numpy as np
import onnx
from onnx import numpy_helper


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--keep", type=int, default=64, help="keep initializers of at most this many elements")
    ap.add_argument("--restore", action="store_true")
    a = ap.parse_args()
    m = onnx.load(a.src)
    rng = np.random.default_rng(0)
    for i, t in enumerate(m.graph.initializer):
        if a.restore:
            if not t.doc_string.startswith("stripped:"):
                continue
            info = json.loads(t.doc_string[len("stripped:"):])
            dt = onnx.helper.tensor_dtype_to_np_dtype(info["dtype"])
            arr = (rng.standard_normal(info["dims"]) * 0.02).astype(dt) if np.issubdtype(dt, np.floating) \
                else np.zeros(info["dims"], dt)
            new = numpy_helper.from_array(arr, t.name)
        else:
            n = int(np.prod(t.dims)) if t.dims else 1
            if n <= a.keep:
                continue
            new = onnx.TensorProto(name=t.name, data_type=t.data_type, dims=[])
            new.doc_string = "stripped:" + json.dumps({"dtype": t.data_type, "dims": list(t.dims)})
        m.graph.initializer[i].CopyFrom(new)
    onnx.save(m, a.dst)


if __name__ == "__main__":
    main()
