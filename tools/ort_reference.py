"""Runs a model with ONNX Runtime for `kiln compare --against onnxruntime` (the kiln command writes
this script next to the inputs and runs it with the Python in $KILN_PYTHON, else python3).

usage: ort_reference.py MODEL IN_DIR OUT_DIR
IN_DIR/inputs.json maps input names to .npy files in IN_DIR; the outputs are written to OUT_DIR as
0.npy, 1.npy, ... with OUT_DIR/outputs.json listing [name, file] pairs in the model's order.
Exit status 3: onnxruntime cannot be imported; 4: it failed on the model (its message on stderr).
"""

import json
import os
import sys


def main() -> int:
    model, in_dir, out_dir = sys.argv[1:4]
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        print(f"onnxruntime is not importable by {sys.executable}: {e} (pip install onnxruntime, or set KILN_PYTHON "
              "to a Python that has it)", file=sys.stderr)
        return 3
    with open(os.path.join(in_dir, "inputs.json"), encoding="utf-8") as f:
        files = json.load(f)
    feed = {name: np.load(os.path.join(in_dir, file)) for name, file in files.items()}
    try:
        sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        outputs = sess.run(None, feed)
    except Exception as e:  # noqa: BLE001 - the message goes to the user as is
        print(f"onnxruntime {ort.__version__}: {e}", file=sys.stderr)
        return 4
    listing = []
    for i, (name, value) in enumerate(zip(names, outputs)):
        value = np.asarray(value)
        if value.dtype == object:
            continue  # strings: .npy holds them only pickled
        file = f"{i}.npy"
        np.save(os.path.join(out_dir, file), np.ascontiguousarray(value))
        listing.append([name, file])
    with open(os.path.join(out_dir, "outputs.json"), "w", encoding="utf-8") as f:
        json.dump({"onnxruntime": ort.__version__, "outputs": listing}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
