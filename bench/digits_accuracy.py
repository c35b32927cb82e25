#!/usr/bin/env python3
"""Real accuracy of kiln's engines at each precision: the trained digits CNN (bench/zoo/digits_cnn.py)
on its held-out test set.

For each precision it builds an engine (`kiln build --device D --precision P`), runs the whole test
set as one batch (`kiln run --output-dir`), and reports top-1 accuracy, the logits' relative L2
against the float32 engine of the same device, and the share of images whose top-1 class agrees with
the float32 engine. onnxruntime (CPU, float32) is the reference row where it is installed.

    python3 bench/digits_accuracy.py --kiln BIN/kiln --data build/digits --device cuda \
        --precisions fp32,tf32,fp16,bf16,best --json out.json

--int8 minmax,entropy,percentile adds INT8 engines (`kiln build --int8 --calibration`),
calibrated on 256 training images (digits_calib_x.npy, 8 sets of 32) that the test set never sees.
fp8 in --precisions builds `--precision fp8` engines calibrated on the same sets (on a CPU engine the
FP8 products are emulated in float32). --model digits_mlp measures the trained MLP (digits_cnn.py
--arch mlp), made of matrix products only: of the CNN, FP8 quantizes the convolutions on CUDA (all but
the 1-channel stem) and nothing on the CPU (its 10-class head's N is not a multiple of 16).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm((a - b).ravel()) / max(np.linalg.norm(b.ravel()), 1e-30))


def kiln_logits(kiln: str, model: str, x_path: str, device: str, precision: str, tmp: str,
                calibration: str | None = None) -> np.ndarray:
    engine = os.path.join(tmp, f"digits_{device}_{precision}.kiln")
    cmd = [kiln, "build", model, "-o", engine, "--device", device, "--opt-level", "2", "--no-accuracy-check"]
    if precision.startswith("int8-"):
        cmd += ["--int8", "--calibration", calibration, "--calibration-method", precision[5:]]
    elif precision == "fp8":
        cmd += ["--precision", "fp8", "--calibration", calibration]
    elif device != "cpu" and not precision.endswith("-qdq"):  # a QDQ model's engine: float32 rest
        cmd += ["--precision", precision]
    b = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if b.returncode != 0:
        raise RuntimeError(f"kiln build {precision}: {b.stderr.strip()}")
    out_dir = os.path.join(tmp, f"out_{device}_{precision}")
    r = subprocess.run([kiln, "run", engine, "--input", f"x={x_path}", "--output-dir", out_dir],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"kiln run {precision}: {r.stderr.strip()}")
    return np.load(os.path.join(out_dir, "logits.npy")).astype(np.float32)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--data", default="build/digits")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--int8", default="", help="calibration methods of INT8 engines: minmax,entropy,percentile")
    ap.add_argument("--json")
    ap.add_argument("--model", default="digits_cnn", help="digits_cnn or digits_mlp (in --data)")
    a = ap.parse_args()

    model = os.path.join(a.data, f"{a.model}.onnx")
    x_path = os.path.join(a.data, "digits_test_x.npy")
    y = np.load(os.path.join(a.data, "digits_test_y.npy"))
    tmp = tempfile.mkdtemp(prefix="kiln_digits_")
    rows = []
    ref = None
    try:
        import onnxruntime as ort  # noqa: PLC0415

        sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        ort_logits = sess.run(None, {"x": np.load(x_path)})[0]
        rows.append({"engine": f"onnxruntime {ort.__version__} cpu fp32", "top1": float((ort_logits.argmax(1) == y).mean())})
    except ImportError:
        ort_logits = None
    precisions = a.precisions.split(",") if a.device != "cpu" else ["fp32"] + (["fp8"] if "fp8" in a.precisions.split(",") else [])
    calibration = None
    if a.int8 or "fp8" in precisions:
        calibration = os.path.join(tmp, "calibration")
        os.makedirs(calibration)
        calib_x = np.load(os.path.join(a.data, "digits_calib_x.npy"))
        for i in range(0, len(calib_x), 32):
            np.save(os.path.join(calibration, f"set{i // 32:02d}.npy"), calib_x[i:i + 32])
        precisions += [f"int8-{m}" for m in a.int8.split(",") if m]
    for prec in precisions:
        try:
            logits = kiln_logits(a.kiln, model, x_path, a.device, prec, tmp, calibration)
        except RuntimeError as e:
            rows.append({"engine": f"kiln {a.device} {prec}", "error": str(e)[:300]})
            continue
        if ref is None:
            ref = logits  # the first precision (fp32) is the reference
        row = {"engine": f"kiln {a.device} {prec}", "top1": float((logits.argmax(1) == y).mean()),
               "rel_l2_vs_fp32_engine": rel_l2(logits, ref),
               "top1_agreement_vs_fp32_engine": float((logits.argmax(1) == ref.argmax(1)).mean())}
        if ort_logits is not None:
            row["rel_l2_vs_onnxruntime"] = rel_l2(logits, ort_logits)
        rows.append(row)
    if a.int8 and ort_logits is not None:
        # The same calibration sets through ONNX Runtime's quantize_static (QDQ, per-channel int8
        # weights, uint8 activations, MinMax), run by ONNX Runtime and by kiln.
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static  # noqa: PLC0415

        calib_x = np.load(os.path.join(a.data, "digits_calib_x.npy"))

        class Reader(CalibrationDataReader):
            def __init__(self):
                self.it = iter([{"x": calib_x[i:i + 32]} for i in range(0, len(calib_x), 32)])

            def get_next(self):
                return next(self.it, None)

        qdq = os.path.join(tmp, "digits_qdq.onnx")
        quantize_static(model, qdq, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        x = np.load(x_path)
        ort_q = ort.InferenceSession(qdq, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        kiln_q = kiln_logits(a.kiln, qdq, x_path, a.device, "fp32-qdq", tmp)
        for label, lg in ((f"onnxruntime {ort.__version__} cpu int8 (its quantize_static QDQ model)", ort_q),
                          (f"kiln {a.device} int8 (ORT's quantize_static QDQ model)", kiln_q)):
            rows.append({"engine": label, "top1": float((lg.argmax(1) == y).mean()), "rel_l2_vs_fp32_engine": rel_l2(lg, ref),
                         "top1_agreement_vs_fp32_engine": float((lg.argmax(1) == ref.argmax(1)).mean()),
                         "rel_l2_vs_onnxruntime": rel_l2(lg, ort_logits)})
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "test_images": int(len(y)), "device": a.device,
            "model": a.model}
    print(f"{a.model}, {len(y)} test images, {meta['date']}")
    print("| engine | top-1 | rel L2 vs fp32 engine | top-1 agreement vs fp32 engine | rel L2 vs onnxruntime |")
    print("|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['engine']} | error: {r['error']} | | | |")
            continue
        cells = [r["engine"], f"{r['top1']:.4f}"]
        for k in ("rel_l2_vs_fp32_engine", "top1_agreement_vs_fp32_engine", "rel_l2_vs_onnxruntime"):
            v = r.get(k)
            cells.append("-" if v is None else (f"{v:.4f}" if "agreement" in k else f"{v:.2e}"))
        print("| " + " | ".join(cells) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
