#!/usr/bin/env python3
"""INT8 on the CPU, side by side: kiln and ONNX Runtime on the same cores in one process.

For each zoo model (bench/zoo) this script makes one set of calibration inputs (zoo.make_inputs, 8
batches) and from it:
  * an ORT-quantized QDQ model (onnxruntime.quantization.quantize_static, per-channel int8 weights,
    uint8 activations, MinMax), run by ONNX Runtime (ORT_ENABLE_ALL: its QDQ → QLinear fusions) and by
    kiln (its fuse-qdq pass: kiln.QConv/kiln.QMatMul on oneDNN's int8 primitives);
  * kiln's own INT8 engine of the float model (kiln.Engine.build(int8=True, calibration=...)),
and times them, with both runtimes' float32 sessions, alternating (ABBA) per pair, medians of batch 1.
Accuracy: relative L2 of each INT8 output against the float32 output on an input outside the
calibration set (the zoo's weights are random: agreement, not task accuracy — bench/digits_accuracy.py
measures that on a trained model).

    .venv/bin/python bench/cpu_int8_bench.py --models resnet50,mobilenet_v2 --threads 1,2 \
        --out bench/results/cpu_int8_<date>.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "zoo"))

import cpu_bench  # noqa: E402
import zoo  # noqa: E402


def rel_l2(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm((a - b).ravel()) / max(np.linalg.norm(b.ravel()), 1e-30))


def ort_qdq(path: str, calib: list[dict], out: str) -> str:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static  # noqa: PLC0415
    from onnxruntime.quantization.shape_inference import quant_pre_process  # noqa: PLC0415

    pre = out + ".pre.onnx"
    quant_pre_process(path, pre, skip_symbolic_shape=True)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            return next(self.it, None)

    quantize_static(pre, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return out


def pair(name: str, a, b, feed, args) -> tuple[dict, dict]:
    ta, tb = cpu_bench.bench_pair(a, b, feed, args.warmup, args.min_runs, args.max_runs, args.budget)
    return cpu_bench.stats(ta, 1), cpu_bench.stats(tb, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50,mobilenet_v2")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--calibration-batches", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--min-runs", type=int, default=10)
    ap.add_argument("--max-runs", type=int, default=60)
    ap.add_argument("--budget", type=float, default=8.0, help="seconds per pair after min-runs")
    ap.add_argument("--out")
    ap.add_argument("--note", default="")
    args = ap.parse_args()

    import kiln  # noqa: PLC0415
    import onnxruntime as ort  # noqa: PLC0415

    tmp = tempfile.mkdtemp(prefix="kiln_int8_")
    rows = []
    for name in args.models.split(","):
        path = zoo.model_path(name, args.opset)
        spec = zoo.MODELS[name]
        calib = [zoo.make_inputs(spec, 1, seed=100 + i) for i in range(args.calibration_batches)]
        feed = zoo.make_inputs(spec, 1, seed=1)
        t0 = time.perf_counter()
        qdq = ort_qdq(path, calib, os.path.join(tmp, f"{name}_qdq.onnx"))
        ort_quant_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        k_int8_engine = kiln.Engine.build(path, int8=True, calibration=calib, opt_level=2)
        kiln_quant_s = time.perf_counter() - t0
        meta = k_int8_engine.metadata()
        ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feed)[0]
        for threads in [int(t) for t in args.threads.split(",")]:
            so = kiln.SessionOptions()
            so.intra_op_num_threads = threads
            k32 = kiln.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            k8 = kiln.InferenceSession(k_int8_engine.serialize(), so, providers=["CPUExecutionProvider"])
            kq = kiln.InferenceSession(qdq, so, providers=["CPUExecutionProvider"])
            o32 = cpu_bench.ort_session(path, threads, spin=False)
            oq = cpu_bench.ort_session(qdq, threads, spin=False)
            s_kq, s_oq = pair(name, kq, oq, feed, args)
            s_k8, s_o32 = pair(name, k8, o32, feed, args)
            s_k32, _ = pair(name, k32, oq, feed, args)
            row = {"model": name, "opset": args.opset, "threads": threads, "batch": 1,
                   "kiln_int8": s_k8, "kiln_ort_qdq": s_kq, "ort_qdq": s_oq, "kiln_fp32": s_k32, "ort_fp32": s_o32,
                   "rel_l2_vs_fp32": {"kiln_int8": rel_l2(k8.run(None, feed)[0], ref),
                                      "kiln_ort_qdq": rel_l2(kq.run(None, feed)[0], ref),
                                      "ort_qdq": rel_l2(oq.run(None, feed)[0], ref)},
                   "kiln_int8_products": meta.get("int8.products"),
                   "quantize_seconds": {"kiln_build_int8": round(kiln_quant_s, 2), "ort_quantize_static": round(ort_quant_s, 2)}}
            rows.append(row)
            print(f"{name:14s} t={threads}: kiln int8 {s_k8['median_ms']:8.2f} ms | kiln on ORT's QDQ "
                  f"{s_kq['median_ms']:8.2f} | ORT QDQ {s_oq['median_ms']:8.2f} | kiln fp32 {s_k32['median_ms']:8.2f} | "
                  f"ORT fp32 {s_o32['median_ms']:8.2f} ms; rel L2 kiln int8 {row['rel_l2_vs_fp32']['kiln_int8']:.2e} "
                  f"ORT QDQ {row['rel_l2_vs_fp32']['ort_qdq']:.2e} (kiln on it {row['rel_l2_vs_fp32']['kiln_ort_qdq']:.2e})",
                  flush=True)
            del k32, k8, kq, o32, oq
            gc.collect()
    result = {"meta": {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "note": args.note,
                       "machine": cpu_bench.machine_info(), "versions": cpu_bench.versions()}, "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
