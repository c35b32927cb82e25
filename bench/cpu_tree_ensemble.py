#!/usr/bin/env python3
"""Tree ensembles (ai.onnx.ml) on the CPU, kiln and ONNX Runtime side by side in one process.

Each case is a scikit-learn model trained here on synthetic data (fixed seeds) and converted by skl2onnx
with its defaults apart from ZipMap (classifiers give their probabilities as a tensor, so what is timed
is the ensemble): a 500-tree gradient boosting classifier and regressor (depth 3, scikit-learn's
default), a 100-tree random forest classifier (deep trees), a HistGradientBoosting regressor, and a 500-tree LightGBM classifier and XGBoost regressor
converted by onnxmltools. Both
runtimes get the same model bytes, the same inputs and the same number of threads, and run alternating
(ABBA) after a warm-up; the figures are medians. The outputs are compared (labels exactly, scores to a
relative 1e-5). The result, with the CPU model and its ISA, goes to
bench/results/cpu_tree_ensemble_<date>.json.

    .venv/bin/python bench/cpu_tree_ensemble.py --threads 1,2 --batches 1,100,10000
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cpu_bench  # noqa: E402


def models(features: int, which: set[str]):
    """(name, model bytes) for each case, trained on 2,000 synthetic rows."""
    import skl2onnx  # noqa: PLC0415
    from sklearn.datasets import make_classification, make_regression  # noqa: PLC0415
    from sklearn.ensemble import (  # noqa: PLC0415
        GradientBoostingClassifier,
        GradientBoostingRegressor,
        HistGradientBoostingRegressor,
        RandomForestClassifier,
    )

    xc, yc = make_classification(2000, features, n_informative=features // 2, n_classes=3, random_state=0)
    xr, yr = make_regression(2000, features, noise=0.5, random_state=0)
    xc, xr = xc.astype(np.float32), xr.astype(np.float32)
    cases = {
        "gbc500": ("GradientBoostingClassifier 500 trees x 3 classes, depth 3",
                   lambda: GradientBoostingClassifier(n_estimators=500, random_state=0).fit(xc, yc), xc),
        "gbr500": ("GradientBoostingRegressor 500 trees, depth 3",
                   lambda: GradientBoostingRegressor(n_estimators=500, random_state=0).fit(xr, yr), xr),
        "rfc100": ("RandomForestClassifier 100 trees x 3 classes, unlimited depth",
                   lambda: RandomForestClassifier(n_estimators=100, random_state=0).fit(xc, yc), xc),
        "hgbr": ("HistGradientBoostingRegressor 100 iterations, 31 leaves",
                 lambda: HistGradientBoostingRegressor(max_iter=100, random_state=0).fit(xr, yr), xr),
        "lgbm500": ("LightGBM LGBMClassifier 500 trees x 3 classes, 31 leaves",
                    lambda: __import__("lightgbm").LGBMClassifier(n_estimators=500, verbose=-1, random_state=0).fit(xc, yc),
                    xc),
        "xgb500": ("XGBoost XGBRegressor 500 trees, depth 6",
                   lambda: __import__("xgboost").XGBRegressor(n_estimators=500, max_depth=6, random_state=0).fit(xr, yr),
                   xr),
    }
    out = []
    for key, (name, fit, x) in cases.items():
        if key not in which:
            continue
        model = fit()
        if key.startswith(("lgbm", "xgb")):  # onnxmltools' converters (opset 15 is their newest)
            import onnxmltools  # noqa: PLC0415
            from onnxmltools.convert.common.data_types import FloatTensorType  # noqa: PLC0415

            types = [("X", FloatTensorType([None, features]))]
            onx = (onnxmltools.convert_lightgbm(model, initial_types=types, target_opset=15, zipmap=False)
                   if key.startswith("lgbm") else onnxmltools.convert_xgboost(model, initial_types=types, target_opset=15))
        else:
            options = {id(model): {"zipmap": False}} if hasattr(model, "predict_proba") else None
            onx = skl2onnx.to_onnx(model, x[:1], options=options, target_opset={"": 17, "ai.onnx.ml": 3})
        onx.ir_version = min(onx.ir_version, 10)
        ops = sorted({n.op_type for n in onx.graph.node})
        out.append((f"{name} [{', '.join(ops)}]", onx.SerializeToString()))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--batches", default="1,100,10000")
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--cases", default="gbc500,gbr500,rfc100,hgbr,lgbm500,xgb500")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--min-runs", type=int, default=10)
    ap.add_argument("--budget", type=float, default=1.0, help="seconds per pair past min-runs")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import onnxruntime as ort  # noqa: PLC0415

    ort.set_default_logger_severity(3)  # the converters' label outputs declare [1]: one warning per run
    rng = np.random.default_rng(1)
    cases = models(args.features, set(args.cases.split(",")))
    results = []
    for threads in (int(t) for t in args.threads.split(",")):
        for name, model in cases:
            ks = cpu_bench.kiln_session(model, threads)
            os_ = cpu_bench.ort_session(model, threads, spin=False)
            iname = os_.get_inputs()[0].name
            for batch in (int(b) for b in args.batches.split(",")):
                feed = {iname: rng.standard_normal((batch, args.features)).astype(np.float32) * 2}
                got, want = ks.run(None, feed), os_.run(None, feed)
                err = 0.0
                for g, w in zip(got, want):
                    if w.dtype.kind not in "iub":
                        err = max(err, float(np.abs(g - w).max() / max(np.abs(w).max(), 1e-30)))
                if len(want) == 2:
                    # Labels equal, but where two classes tie (a forest's vote fractions can), the
                    # summation order decides: such rows must be ties in both.
                    probs = np.sort(want[1], axis=1)
                    differ = np.flatnonzero(got[0] != want[0])
                    assert np.all(probs[differ, -1] - probs[differ, -2] < 1e-6), f"{name}: labels differ"
                assert err < 1e-5, f"{name}: scores differ by {err}"
                kt, ot = cpu_bench.bench_pair(ks, os_, feed, args.warmup, args.min_runs, 10000, args.budget)
                results.append(cpu_bench.pair_row(f"{name[:60]:60s} t={threads} N={batch:6d}",
                                                  {"case": name, "threads": threads, "batch": batch}, kt, ot, batch, err))
    out = args.out or os.path.join(HERE, "results", f"cpu_tree_ensemble_{datetime.date.today().isoformat()}.json")
    import sklearn  # noqa: PLC0415
    import skl2onnx  # noqa: PLC0415

    versions = {"scikit-learn": sklearn.__version__, "skl2onnx": skl2onnx.__version__}
    for extra in ("onnxmltools", "lightgbm", "xgboost"):
        try:
            versions[extra] = __import__(extra).__version__
        except ImportError:
            pass
    cpu_bench.write_side_by_side(out, args, results, **versions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
