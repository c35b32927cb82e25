#!/usr/bin/env python3
"""Models outside the zoo, kiln against onnxruntime on the CPU: a survey for ops and patterns the zoo
does not exercise (an op the channels-last pass does not know costs a Transpose each way). Two steps,
in the two environments scripts/setup_zoo.sh and scripts/setup.sh make:

    .venv-zoo/bin/python bench/other_models.py export            # torchvision models -> build/other/*.onnx
    PYTHONPATH=python .venv/bin/python bench/other_models.py compare --threads 1

`compare` checks each output against onnxruntime's (relative max error) and times both alternately in
one process (onnxruntime's spinning off, ABBA, median of --runs each); under load or on a shared
machine the ratios move by 10% or more, so it finds gross gaps, it does not replace bench/cpu_bench.py.
Not a test.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "build", "other")
MODELS = ["shufflenet_v2_x1_0", "resnext50_32x4d", "regnet_y_400mf", "densenet121", "squeezenet1_1", "mnasnet1_0",
          "googlenet", "mobilenet_v3_large", "mobilenet_v3_small", "inception_v3", "efficientnet_b3", "regnet_x_1_6gf",
          "wide_resnet50_2", "vgg11", "alexnet", "swin_t", "resnet18"]


def export(names: list[str]) -> None:
    import torch  # noqa: PLC0415
    import torchvision  # noqa: PLC0415

    os.makedirs(OUT, exist_ok=True)
    for name in names:
        try:
            model = getattr(torchvision.models, name)(weights=None).eval()
            torch.manual_seed(0)
            path = os.path.join(OUT, f"{name}.onnx")
            size = 299 if name == "inception_v3" else 224
            torch.onnx.export(model, (torch.randn(1, 3, size, size),), path, opset_version=17, input_names=["x"],
                              output_names=["y"])
            print("exported", path, flush=True)
        except Exception as e:  # noqa: BLE001 - one model's exporter failure leaves the others to survey
            print(f"{name}: not exported ({type(e).__name__}: {str(e)[:200]})", flush=True)


def compare(names: list[str], threads: int, runs: int) -> None:
    import numpy as np  # noqa: PLC0415
    import onnx  # noqa: PLC0415

    sys.path.insert(0, HERE)
    from cpu_bench import kiln_session, ort_session  # noqa: PLC0415

    for name in names:
        path = os.path.join(OUT, f"{name}.onnx")
        if not os.path.exists(path):
            print(f"{name}: not exported (run the export step)")
            continue
        m = onnx.load(path)
        if m.ir_version > 10:  # onnxruntime reads IR 10 at most; a newer exporter writes more
            m.ir_version = 10
            onnx.save(m, path)
        k, o = kiln_session(path, threads), ort_session(path, threads, spin=False)
        dims = [d.dim_value or 1 for d in m.graph.input[0].type.tensor_type.shape.dim]  # 299 for Inception v3
        feed = {"x": np.random.default_rng(0).standard_normal(dims).astype(np.float32)}
        yk, yo = k.run(None, feed)[0], o.run(None, feed)[0]
        err = float(np.abs(yk - yo).max() / (np.abs(yo).max() + 1e-12))
        for s in (k, o):
            for _ in range(3):
                s.run(None, feed)
        kt, ot = [], []
        for i in range(runs):
            for s, acc in ((k, kt), (o, ot)) if i % 2 == 0 else ((o, ot), (k, kt)):
                start = time.perf_counter()
                s.run(None, feed)
                acc.append(time.perf_counter() - start)
        km, om = float(np.median(kt)) * 1e3, float(np.median(ot)) * 1e3
        print(f"{name:22s} threads {threads}: kiln {km:8.2f} ms  onnxruntime {om:8.2f} ms  ratio {km / om:.2f}  "
              f"relative max error {err:.1e}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=["export", "compare"])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    names = args.models.split(",")
    if args.step == "export":
        export(names)
    else:
        compare(names, args.threads, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
