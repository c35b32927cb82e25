#!/usr/bin/env python3
"""Issue #12: does `kiln build --int8 --accuracy-budget B` meet its budget on every zoo model, and is the
error the build reports the error one measures afterwards?

For each zoo model (bench/zoo, exported as build/zoo/<model>_op17.onnx): NSETS calibration sets of
batch 2 (seeds 1..NSETS) and two held-out sets (seeds 101, 102) from the zoo's input generator. It
builds the INT8 engine under the budget (`--int8 --calibration DIR --accuracy-budget B`, metric
rel_l2: the relative L2 of all outputs pooled over the sets) and the float32 engine, reads the build's
report from the engine (`kiln inspect`: int8.error, int8.products), then runs both engines itself
(`kiln run`) on the calibration sets and on the held-out sets and computes the same metric, plus
top-1 agreement for the classifiers. One JSON row per model:

    python3 bench/int8_budget_zoo.py --kiln build/kiln --budget 0.02 \
        --json bench/results/int8_budget_zoo_cpu.json [--models resnet50,bert_base] [--device cpu]

"Meets" is `measured on the calibration sets <= budget`: the build's guarantee. The held-out error
shows how far that carries to inputs the build never saw.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "zoo"))
import zoo  # noqa: E402

CLASSIFIERS = {"resnet50", "mobilenet_v2", "efficientnet_b0", "convnext_tiny", "vit_b_16"}


def save_sets(folder: str, model: zoo.Model, seeds: list[int], batch: int) -> list[dict[str, str]]:
    """One subfolder per set with <input>.npy; returns each set's {input: path}."""
    sets = []
    for s in seeds:
        d = os.path.join(folder, f"set{s:03d}")
        os.makedirs(d, exist_ok=True)
        paths = {}
        for name, arr in zoo.make_inputs(model, batch, seed=s).items():
            paths[name] = os.path.join(d, f"{name}.npy")
            np.save(paths[name], arr)
        sets.append(paths)
    return sets


def run_engine(kiln: str, engine: str, feed: dict[str, str], out: str, outputs: tuple) -> list[np.ndarray]:
    args = [kiln, "run", engine, "--output-dir", out]
    for name, path in feed.items():
        args += ["--input", f"{name}={path}"]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return [np.load(os.path.join(out, f"{o}.npy")).astype(np.float64) for o in outputs]


def pooled_rel_l2(got: list[list[np.ndarray]], want: list[list[np.ndarray]]) -> float:
    num = sum(float(np.sum((g - w) ** 2)) for gs, ws in zip(got, want) for g, w in zip(gs, ws))
    den = sum(float(np.sum(w**2)) for ws in want for w in ws)
    return (num / den) ** 0.5 if den > 0 else num**0.5


def top1_agreement(got: list[list[np.ndarray]], want: list[list[np.ndarray]]) -> float:
    same = total = 0
    for gs, ws in zip(got, want):
        g, w = gs[0].reshape(gs[0].shape[0], -1), ws[0].reshape(ws[0].shape[0], -1)
        same += int((g.argmax(1) == w.argmax(1)).sum())
        total += g.shape[0]
    return same / total if total else 1.0


def inspect_meta(kiln: str, engine: str) -> dict[str, str]:
    text = subprocess.run([kiln, "inspect", engine], check=True, capture_output=True, text=True).stdout
    meta = {}
    for line in text.splitlines():
        m = re.match(r"\s+(int8\.[a-z_.0-9]+): (.*)$", line)
        if m:
            meta[m.group(1)] = m.group(2).strip()
    return meta


def one_model(args, name: str, tmp: str) -> dict:
    model = zoo.MODELS[name]
    onnx_path = zoo.model_path(name, 17)
    if not os.path.exists(onnx_path):
        return {"model": name, "skipped": f"{onnx_path} missing ({zoo.export_command(name, 17)})"}
    work = os.path.join(tmp, name)
    calib = save_sets(os.path.join(work, "calib"), model, list(range(1, args.sets + 1)), 2)
    held = save_sets(os.path.join(work, "held"), model, [101, 102], 2)
    fp32, int8 = os.path.join(work, "fp32.kiln"), os.path.join(work, "int8.kiln")
    base = [args.kiln, "build", onnx_path, "--device", args.device]
    subprocess.run(base + ["-o", fp32], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t0 = time.time()
    b = subprocess.run(base + ["-o", int8, "--int8", "--calibration", os.path.join(work, "calib"),
                               "--accuracy-budget", str(args.budget)] + (["--precision", "fp16"] if args.device == "cuda" else []),
                       capture_output=True, text=True)
    build_s = time.time() - t0
    if b.returncode != 0:
        return {"model": name, "error": (b.stderr or b.stdout).strip().splitlines()[-1:]}
    meta = inspect_meta(args.kiln, int8)
    reported = None
    m = re.match(r"rel_l2 ([0-9.eE+-]+) \(budget", meta.get("int8.error", ""))
    if m:
        reported = float(m.group(1))
    row = {"model": name, "budget": args.budget, "products": meta.get("int8.products"), "reported": reported,
           "build_s": round(build_s, 1)}
    for label, sets in (("calibration", calib), ("held_out", held)):
        want, got = [], []
        for i, feed in enumerate(sets):
            want.append(run_engine(args.kiln, fp32, feed, os.path.join(work, f"o32_{label}{i}"), model.outputs))
            got.append(run_engine(args.kiln, int8, feed, os.path.join(work, f"o8_{label}{i}"), model.outputs))
        row[f"measured_{label}"] = pooled_rel_l2(got, want)
        if name in CLASSIFIERS:
            row[f"top1_agreement_{label}"] = top1_agreement(got, want)
    row["meets_budget"] = row["measured_calibration"] <= args.budget * (1 + 1e-6)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--budget", type=float, default=0.02)
    ap.add_argument("--sets", type=int, default=4, help="calibration sets (batch 2 each)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--models", default=",".join(zoo.MODELS))
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            row = one_model(args, name, tmp)
            rows.append(row)
            print(json.dumps(row), flush=True)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": args.device,
            "machine": platform.machine(), "cpus": os.cpu_count(), "budget": args.budget,
            "calibration_sets": f"{args.sets} x batch 2 (seeds 1..{args.sets})", "held_out": "2 x batch 2 (seeds 101, 102)"}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    failed = [r["model"] for r in rows if "meets_budget" in r and not r["meets_budget"]]
    print("budget met on", sum(1 for r in rows if r.get("meets_budget")), "of", len(rows), "models", "" if not failed else f"(not: {failed})")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
