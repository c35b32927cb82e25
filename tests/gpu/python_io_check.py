"""Python IOBinding / DLPack / profiling on a CUDA GPU (run by tests/gpu/python_io_check.sh with the
kiln package on sys.path). Each check prints one line; any failure raises."""

import json
import os
import sys
import tempfile

import numpy as np
import torch

import kiln

model, x_path = "examples/tiny_cnn.onnx", "examples/tiny_cnn_input.npy"
x = np.load(x_path)
want = kiln.InferenceSession(model).run(None, {"image": x})[0]
assert kiln.cuda_available(), "CUDA is not usable"
sess = kiln.InferenceSession(model, providers=["CUDAExecutionProvider"])
assert sess.get_providers()[0] == "CUDAExecutionProvider", sess.get_providers()
print("providers:", sess.get_providers())


def close(a, b, what):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=what)
    print(f"ok: {what} (max abs diff {np.max(np.abs(a - b)):.2e})")


# torch CUDA tensor in by DLPack (zero copy), output left on the GPU, out to torch by DLPack (zero copy).
xt = torch.from_numpy(x).cuda()
torch.cuda.synchronize()
xk = kiln.Tensor.from_dlpack(xt)
assert xk.device_name() == "cuda" and xk.data_ptr() == xt.data_ptr(), (xk, xk.data_ptr(), xt.data_ptr())
b = sess.io_binding()
b.bind_ortvalue_input("image", xk)
b.bind_output("probabilities", "cuda")
sess.run_with_iobinding(b)
out = b.get_outputs()[0]
assert out.device_name() == "cuda", out
yt = torch.from_dlpack(out)
assert yt.is_cuda and yt.data_ptr() == out.data_ptr()
close(yt.cpu().numpy(), want, "torch in / cuda out / torch out by DLPack")
ptr = out.data_ptr()
xt.mul_(0.5)
torch.cuda.synchronize()
sess.run_with_iobinding(b)
assert b.get_outputs()[0].data_ptr() == ptr, "second run did not write the bound device output in place"
close(b.copy_outputs_to_cpu()[0], kiln.InferenceSession(model).run(None, {"image": x * 0.5})[0],
      "second run reads the changed torch input and writes the same device buffer")

# Raw device pointers (bind_input / bind_output with buffer_ptr), as ORT's API takes them.
yb = torch.empty(tuple(want.shape), device="cuda")
xt2 = torch.from_numpy(x).cuda()
torch.cuda.synchronize()
b2 = sess.io_binding()
b2.bind_input("image", "cuda", 0, np.float32, list(x.shape), xt2.data_ptr())
b2.bind_output("probabilities", "cuda", 0, np.float32, list(want.shape), yb.data_ptr())
sess.run_with_iobinding(b2)
torch.cuda.synchronize()
close(yb.cpu().numpy(), want, "raw device pointers in and out (written in place)")

# OrtValue-style tensors, CPU input to a CUDA session, run_with_ort_values.
(o,) = sess.run_with_ort_values(None, {"image": kiln.OrtValue.ortvalue_from_numpy(x, "cuda", 0)})
close(o.numpy(), want, "run_with_ort_values with a CUDA OrtValue")
(o,) = sess.run(None, {"image": x})
close(o, want, "plain run on the CUDA session")

# Profiling on the GPU: one event per step, on cuda, waited for one by one.
so = kiln.SessionOptions()
so.enable_profiling = True
so.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "p")
ps = kiln.InferenceSession(model, so, providers=["CUDAExecutionProvider"])
for _ in range(3):
    ps.run(None, {"image": x})
with open(ps.end_profiling()) as f:
    trace = json.load(f)["traceEvents"]
nodes = [e for e in trace if e.get("cat") == "Node"]
devices = {e["args"]["device"] for e in nodes}
print(f"ok: profile has {len(nodes)} step events over 3 runs on {sorted(devices)}; "
      f"mean step {np.mean([e['dur'] for e in nodes]):.1f} us")
assert "cuda" in devices
print("ALL OK")
