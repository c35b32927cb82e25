#!/usr/bin/env python3
"""GPU side by side: kiln engines against PyTorch eager and torch.compile, same GPU, same run.

Run it on a machine with an NVIDIA GPU, torch, torchvision and transformers, after the models were
exported (python3 bench/zoo/export.py --models resnet50,bert_base --opsets 17):

    python3 bench/gpu_bench.py --kiln BIN/kiln --models resnet50,bert_base --batches 1,64 \
        --precisions fp32,fp16 --json out.json

What is timed (median of --iterations after --warmup, milliseconds):
  * kiln: `kiln bench` on an engine built with `kiln build --device cuda --precision P`: one
    run_into per call, host (NumPy) inputs in, host outputs out: copy in, run, copy out, wait.
    With CUDA graphs (the default) and with --no-cuda-graphs.
  * torch "host": the same unit of work: host inputs copied to the GPU, forward, outputs copied back
    to the host, wall time. Eager, and torch.compile (--compile-modes, default and reduce-overhead,
    the CUDA-graph mode PyTorch recommends for small batches).
  * torch "device": eager with inputs already on the GPU and outputs left there, CUDA events: the
    GPU-resident figure that most PyTorch numbers quote, for reference.
  * GPU-resident, both sides timed the same way (second table): inputs already in GPU memory and
    outputs left there, host clock around each call and a wait for the GPU: kiln `bench --device-io`
    (run_into with CUDA tensors), torch eager and torch.compile with torch.cuda.synchronize().
  * GPU-resident, CUDA events (third table): the same calls, timed by a CUDA event recorded on the
    stream before and after each call (kiln: `kiln bench` runs the context on a stream of its own
    and records the events there; torch: torch.cuda.Event on the current stream). Gaps where the GPU
    waits for the host inside a call count on both sides; the host time before the first launch
    does not.
FP32 means true FP32 on both sides (TF32 off); FP16 means torch's model.half() against kiln's
--precision fp16 engine (float32 accumulation in GEMMs and convolutions on both). FP8 means kiln's
--precision fp8 engine (E4M3 GEMMs with constant weights, scales calibrated on --calibration-sets
input sets drawn from other seeds than the timed input, the rest float16) against torch's FP16
figures of the same run (PyTorch has no FP8 inference path for these models without extra
libraries): list fp16 before fp8 in --precisions. INT8 ("int8") is kiln's `--int8 --precision fp16` engine
(calibrated the same way) against the same fp16 torch figures.
Transformers run with PyTorch's default attention (scaled_dot_product_attention), its fastest.
--half-outputs builds kiln's reduced-precision engines with float16 outputs (`kiln build --half-outputs`),
as torch's half model returns them; by default kiln's outputs keep the ONNX model's float32.
--torch-profile DIR writes torch's side of a kernel profile (torch.profiler, per kernel: calls and
microseconds per call) for eager and each torch.compile mode; tests/gpu/kernel_table.py makes kiln's
side from Nsight Compute.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench", "zoo"))
import zoo  # noqa: E402


def kiln_bench(kiln: str, engine: str, args: list, n: int, warmup: int, graphs: bool, device_io: bool = False) -> dict:
    cmd = [kiln, "bench", engine, *args, "-n", str(n), "--warmup", str(warmup)]
    if not graphs:
        cmd.append("--no-cuda-graphs")
    if device_io:
        cmd.append("--device-io")
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    m = re.search(r"median ([0-9.]+) ms", out.stdout)
    if out.returncode != 0 or not m:
        return {"error": (out.stderr or out.stdout).strip().splitlines()[-1:]}
    g = re.search(r"cuda graphs: (\d+)", out.stdout)
    gpu = re.search(r"gpu median ([0-9.]+) ms", out.stdout)
    return {"ms": float(m.group(1)), "graphs": int(g.group(1)) if g else 0,
            "gpu_ms": float(gpu.group(1)) if gpu else None}


def torch_model(name: str, precision: str):
    import torch  # noqa: PLC0415

    torch.manual_seed(0)
    spec = zoo.MODELS[name]
    if spec.source == "torchvision":
        import torchvision  # noqa: PLC0415

        net = getattr(torchvision.models, name)(weights=None)
        keys = None
    elif spec.source == "timm":
        import timm  # noqa: PLC0415

        net = timm.create_model(name, pretrained=False)
        keys = None
    else:
        import transformers as tf  # noqa: PLC0415

        if name == "bert_base":
            net = tf.BertModel(tf.BertConfig())
        elif name == "distilbert":
            net = tf.DistilBertModel(tf.DistilBertConfig())
        elif name == "gpt2":
            net = tf.GPT2LMHeadModel(tf.GPT2Config(use_cache=False))
        elif name == "llama_gqa":
            import export  # noqa: PLC0415

            net = tf.LlamaModel(tf.LlamaConfig(use_cache=False, **export.LLAMA_GQA))
        else:
            raise ValueError(name)
        keys = spec.outputs
    net = net.cuda().eval()
    if precision == "fp16":
        net = net.half()
    names = [i.name for i in spec.inputs]

    def forward(*xs):
        if keys is None:
            return (net(*xs),)
        out = net(**dict(zip(names, xs)))
        return tuple(out[k] for k in keys)

    return forward


def torch_half_error(name: str, feed: dict) -> float:
    """Relative L2 of PyTorch's own model.half() output against its float32 output, on the very
    model kiln's ONNX file was exported from (bench/zoo/export.py: same seed, calibrated batch norm):
    the error a reduced-precision run of this random-weight model has by itself."""
    import copy  # noqa: PLC0415

    import export  # noqa: PLC0415
    import torch  # noqa: PLC0415

    spec = zoo.MODELS[name]
    net = export.build(name).cuda()
    xs = [torch.from_numpy(feed[i.name]).cuda() for i in spec.inputs]
    with torch.inference_mode():
        ref = net(*xs)
        half = copy.deepcopy(net).half()
        out = half(*[x.half() if x.is_floating_point() else x for x in xs])
    ref = ref[0] if isinstance(ref, tuple) else ref
    out = out[0] if isinstance(out, tuple) else out
    return float(torch.linalg.vector_norm(out.float() - ref) / torch.linalg.vector_norm(ref))


def kiln_half_error(kiln: str, a: str, b: str, args: list) -> float | None:
    out = subprocess.run([kiln, "compare", a, b, *args, "--rtol", "1"], capture_output=True, text=True, check=False)
    m = re.search(r"relative L2 ([0-9.e+-]+)", out.stdout)
    return float(m.group(1)) if m else None


def device_inputs(feeds: list, precision: str) -> list:
    """Host arrays copied to the GPU (float ones as float16 for the fp16 model)."""
    import torch  # noqa: PLC0415

    xs = [torch.from_numpy(a).cuda() for a in feeds]
    return [x.half() if precision == "fp16" and x.is_floating_point() else x for x in xs]


def time_host(fn, feeds: list, precision: str, n: int, warmup: int) -> float:
    import torch  # noqa: PLC0415

    def call():
        xs = device_inputs(feeds, precision)
        with torch.inference_mode():
            outs = fn(*xs)
        return [o.float().cpu() for o in outs]  # .cpu() waits for the GPU

    for _ in range(warmup):
        call()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def time_device(fn, feeds: list, precision: str, n: int, warmup: int) -> float:
    import torch  # noqa: PLC0415

    xs = device_inputs(feeds, precision)
    with torch.inference_mode():
        for _ in range(warmup):
            fn(*xs)
        ts = []
        for _ in range(n):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn(*xs)
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e))
    return statistics.median(ts)


def time_device_sync(fn, feeds: list, precision: str, n: int, warmup: int) -> float:
    """GPU-resident inputs and outputs, host clock around each call plus a wait for the GPU: the way
    `kiln bench --device-io` times kiln."""
    import torch  # noqa: PLC0415

    xs = device_inputs(feeds, precision)
    with torch.inference_mode():
        for _ in range(warmup):
            fn(*xs)
        torch.cuda.synchronize()
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn(*xs)
            torch.cuda.synchronize()
            ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def torch_kernel_table(fn, feeds: list, precision: str, runs: int = 5) -> list:
    """Where torch's time goes: torch.profiler over `runs` GPU-resident calls after a warm-up, each
    CUDA kernel's (name, calls per call, microseconds per call), largest first. Kernels inside CUDA
    graph replays (torch.compile's reduce-overhead) are traced one by one by CUPTI."""
    import torch  # noqa: PLC0415
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    xs = device_inputs(feeds, precision)
    with torch.inference_mode():
        for _ in range(3):
            fn(*xs)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(runs):
                fn(*xs)
            torch.cuda.synchronize()
    table = {}
    for e in prof.events():
        if str(getattr(e, "device_type", "")).endswith("CUDA") and e.name and not e.name.startswith(("Memcpy", "Memset")):
            us = e.time_range.elapsed_us()  # a kernel's own interval on the device
            calls, total = table.get(e.name, (0, 0.0))
            table[e.name] = (calls + 1, total + us)
    return sorted(((k, c / runs, t / runs) for k, (c, t) in table.items()), key=lambda r: -r[2])


def write_kernel_table(path: str, title: str, rows: list) -> float:
    """rows as a text table (kernel, calls per call, us per call, %) under `title`; the total in ms."""
    total = sum(r[2] for r in rows)
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{title}\n{'kernel':<100} {'calls/run':>9} {'us/run':>10} {'%':>6}\n")
        for name, calls, us in rows:
            f.write(f"{name[:100]:<100} {calls:>9.1f} {us:>10.1f} {100 * us / max(total, 1e-9):>6.1f}\n")
        f.write(f"{'total':<100} {'':>9} {total:>10.1f}\n")
    return total / 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True, help="the kiln command")
    ap.add_argument("--models", default="resnet50,bert_base")
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--compile-modes", default="default,reduce-overhead", help="torch.compile modes ('' for none)")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--opt-level", type=int, default=2, help="kiln's optimization level (2: fusions)")
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--torch-profile", metavar="DIR",
                    help="also write a per-kernel table of torch eager and each torch.compile mode (torch.profiler, "
                         "GPU-resident calls) per model, precision and batch into DIR")
    ap.add_argument("--calibration-sets", type=int, default=8, help="fp8: input sets (batch 4, seeds 1..N) to calibrate on")
    ap.add_argument("--half-outputs", action="store_true",
                    help="build kiln's reduced-precision engines with --half-outputs: their outputs in float16, as torch's "
                         "model.half() returns them (default: float32 outputs, the ONNX model's types)")
    a = ap.parse_args()

    import torch  # noqa: PLC0415

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    rows, accuracy = [], []
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "host": platform.node(),
        "kiln_opt_level": a.opt_level,
        "kiln_half_outputs": a.half_outputs,
        "method": "medians per call: host wall time (host inputs in, host outputs out); GPU-resident host wall "
                  "time with a wait; GPU-resident CUDA events (kiln gpu_ms, torch *_device_ms)",
    }
    modes = [m for m in a.compile_modes.split(",") if m]
    tmp = tempfile.mkdtemp(prefix="kiln_gpu_bench_")
    def saved_feed(name: str, batch: int) -> tuple:
        """The timed input of `name` at `batch` (seed 0), saved as .npy, and kiln's --input arguments."""
        feed = zoo.make_inputs(zoo.MODELS[name], batch, seed=0)
        args = []
        for k, v in feed.items():
            p = os.path.join(tmp, f"{name}_{k}_b{batch}.npy")
            np.save(p, v)
            args += ["--input", f"{k}={p}"]
        return feed, args

    for name in a.models.split(","):
        spec = zoo.MODELS[name]
        onnx_path = zoo.model_path(name, a.opset)
        if not os.path.exists(onnx_path):
            print(f"{name}: {onnx_path} not exported; skipped", flush=True)
            continue
        for prec in a.precisions.split(","):
            engine = os.path.join(tmp, f"{name}_{prec}.kiln")
            extra_args = []
            build_prec = prec
            if prec == "int8":  # kiln's INT8 engine, its float rest in float16 (TensorRT's --int8 --fp16)
                build_prec = "fp16"
            if prec in ("fp8", "int8"):
                calib = os.path.join(tmp, f"{name}_calibration")
                for s in range(1, a.calibration_sets + 1):
                    os.makedirs(os.path.join(calib, f"set{s:02d}"), exist_ok=True)
                    for k, v in zoo.make_inputs(spec, 4, seed=s).items():
                        np.save(os.path.join(calib, f"set{s:02d}", f"{k}.npy"), v)
                extra_args = ["--calibration", calib] + (["--int8"] if prec == "int8" else [])
            if a.half_outputs and prec != "fp32":
                extra_args.append("--half-outputs")
            t_build = time.perf_counter()
            b = subprocess.run([a.kiln, "build", onnx_path, "-o", engine, "--device", "cuda", "--precision", build_prec,
                                "--opt-level", str(a.opt_level)] + extra_args,
                               capture_output=True, text=True, check=False)
            build_s = round(time.perf_counter() - t_build, 1)
            if b.returncode != 0:
                print(f"{name} {prec}: kiln build failed: {b.stderr.strip()}", flush=True)
                continue
            report = [line for line in b.stdout.splitlines() if line.startswith(("fp8:", "int8:")) or "relative L2" in line]
            if prec in ("fp8", "int8"):  # torch's figures: the fp16 rows of this run
                for batch in [int(x) for x in a.batches.split(",")]:
                    peer = next((r for r in rows if r["model"] == name and r["precision"] == "fp16" and r["batch"] == batch), None)
                    feed, args = saved_feed(name, batch)
                    n, w = a.iterations, a.warmup
                    row = {"model": name, "precision": prec, "batch": batch, "build_s": build_s, "build_report": report,
                           "torch_peer": "the fp16 row's torch figures"}
                    row["kiln"] = kiln_bench(a.kiln, engine, args, n, w, graphs=True)
                    row["kiln_no_graphs"] = kiln_bench(a.kiln, engine, args, n, w, graphs=False)
                    row["kiln_device_io"] = kiln_bench(a.kiln, engine, args, n, w, graphs=True, device_io=True)
                    for k, v in (peer or {}).items():
                        if k.startswith("torch_"):
                            row[k] = v
                    row.setdefault("torch_eager_host_ms", None)
                    row.setdefault("torch_eager_device_ms", None)
                    row.setdefault("torch_eager_device_sync_ms", None)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                continue
            fn = torch_model(name, prec)
            compiled = {}
            for mode in modes:
                compiled[mode] = torch.compile(fn, mode=None if mode == "default" else mode, dynamic=False)
            for batch in [int(x) for x in a.batches.split(",")]:
                feed, args = saved_feed(name, batch)
                feeds = [feed[i.name] for i in spec.inputs]
                n, w = a.iterations, a.warmup
                row = {"model": name, "precision": prec, "batch": batch}
                row["kiln"] = kiln_bench(a.kiln, engine, args, n, w, graphs=True)
                row["kiln_no_graphs"] = kiln_bench(a.kiln, engine, args, n, w, graphs=False)
                row["kiln_device_io"] = kiln_bench(a.kiln, engine, args, n, w, graphs=True, device_io=True)
                row["torch_eager_host_ms"] = time_host(fn, feeds, prec, n, w)
                row["torch_eager_device_ms"] = time_device(fn, feeds, prec, n, w)
                row["torch_eager_device_sync_ms"] = time_device_sync(fn, feeds, prec, n, w)
                for mode, cf in compiled.items():
                    t0 = time.perf_counter()
                    try:
                        time_host(cf, feeds, prec, 1, 2)  # compiles (and records graphs)
                        row[f"torch_compile_{mode}_compile_s"] = round(time.perf_counter() - t0, 1)
                        row[f"torch_compile_{mode}_host_ms"] = time_host(cf, feeds, prec, n, w)
                        row[f"torch_compile_{mode}_device_sync_ms"] = time_device_sync(cf, feeds, prec, n, w)
                        row[f"torch_compile_{mode}_device_ms"] = time_device(cf, feeds, prec, n, w)
                    except Exception as e:  # noqa: BLE001 — report, keep going
                        row[f"torch_compile_{mode}_host_ms"] = None
                        row[f"torch_compile_{mode}_error"] = str(e).splitlines()[0][:200]
                if a.torch_profile:
                    os.makedirs(a.torch_profile, exist_ok=True)
                    for label, f in [("eager", fn)] + [(f"compile_{m}", cf) for m, cf in compiled.items()]:
                        try:
                            kernels = torch_kernel_table(f, feeds, prec)
                        except Exception as e:  # noqa: BLE001 — a profile is an extra; report, keep going
                            row[f"torch_{label}_profile_error"] = str(e).splitlines()[0][:200]
                            continue
                        out = os.path.join(a.torch_profile, f"{name}_{prec}_b{batch}_torch_{label}.txt")
                        title = f"{name} {prec} batch {batch}, torch {label} ({meta['gpu']}, torch {meta['torch']})"
                        row[f"torch_{label}_kernel_ms"] = round(write_kernel_table(out, title, kernels), 4)
                rows.append(row)
                print(json.dumps(row), flush=True)
            del fn, compiled
            torch.cuda.empty_cache()
        # Accuracy of the float16 engine against the float32 engine, next to PyTorch's own.
        e32, e16 = (os.path.join(tmp, f"{name}_{p}.kiln") for p in ("fp32", "fp16"))
        if os.path.exists(e32) and os.path.exists(e16):
            feed = zoo.make_inputs(spec, 1, seed=0)
            args = []
            for k, v in feed.items():
                p = os.path.join(tmp, f"{name}_{k}_acc.npy")
                np.save(p, v)
                args += ["--input", f"{k}={p}"]
            acc = {"model": name, "kiln_fp16_rel_l2": kiln_half_error(a.kiln, e32, e16, args),
                   "torch_fp16_rel_l2": torch_half_error(name, feed)}
            accuracy.append(acc)
            print(json.dumps(acc), flush=True)

    def table(title: str, kiln_cols: list, torch_key: str, extra: tuple = ()) -> None:
        """kiln's columns, then torch eager and each torch.compile mode timed as `torch_key` says, then
        kiln (first column) over the fastest torch figure, then any extra (header, row key) columns."""
        print(title)
        hdr = "| model | prec | batch | " + " | ".join(h for h, _, _ in kiln_cols) + " | torch eager | " + \
            " | ".join(f"torch.compile {m}" for m in modes) + " | kiln / best torch |" + "".join(f" {h} |" for h, _ in extra)
        print(hdr)
        print("|" + "---|" * (hdr.count("|") - 1))
        for r in rows:
            ks = [r[key].get(field) for _, key, field in kiln_cols]
            ts = [r[f"torch_eager_{torch_key}_ms"]] + [r.get(f"torch_compile_{m}_{torch_key}_ms") for m in modes]
            if all(t is None for t in ts):
                continue
            best = min(t for t in ts if t is not None)
            cells = [r["model"], r["precision"], str(r["batch"])]
            cells += [f"{k:.3f}" if k else "error" for k in ks]
            cells += [f"{t:.3f}" if t is not None else "error" for t in ts]
            cells.append(f"{ks[0] / best:.2f}" if ks[0] else "-")
            cells += [f"{r[key]:.3f}" if r.get(key) is not None else "-" for _, key in extra]
            print("| " + " | ".join(cells) + " |")

    # kiln against the best torch figure measured the same way: host in, host out; then GPU-resident.
    table(f"\n{meta['gpu']}, torch {meta['torch']}, {meta['date']}; ms per call, median (host inputs in, host outputs out)",
          [("kiln", "kiln", "ms"), ("kiln, no graphs", "kiln_no_graphs", "ms")], "host",
          extra=(("torch eager on-device", "torch_eager_device_ms"),))
    table("\nGPU-resident inputs and outputs, host clock around each call and a wait for the GPU (ms, median)",
          [("kiln --device-io", "kiln_device_io", "ms")], "device_sync")
    table("\nGPU-resident inputs and outputs, CUDA events before and after each call on its stream (ms, median)",
          [("kiln --device-io", "kiln_device_io", "gpu_ms")], "device")
    if accuracy:
        print("\nfloat16 output against float32 output, batch 1, first output (relative L2)")
        print("| model | kiln fp16 engine vs fp32 engine | torch model.half() vs float32 |")
        print("|---|---|---|")
        for r in accuracy:
            k = r["kiln_fp16_rel_l2"]
            print(f"| {r['model']} | {k:.2e} | {r['torch_fp16_rel_l2']:.2e} |" if k is not None else
                  f"| {r['model']} | error | {r['torch_fp16_rel_l2']:.2e} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "rows": rows, "accuracy": accuracy}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
