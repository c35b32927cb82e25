"""The example model's expected output, from ONNX Runtime on the CPU (scripts/check_install.sh and
scripts/check_wheel.sh compare the installed kiln against it).

Usage: python ort_expected.py MODEL INPUT.npy OUT.npy   (the model's first input and first output)
"""

import sys

import numpy as np
import onnxruntime as ort

model, inp, out = sys.argv[1:]
sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
(y,) = sess.run(None, {sess.get_inputs()[0].name: np.load(inp)})
np.save(out, y)
print(f"{sess.get_outputs()[0].name}: {y.shape} {y.dtype}")
