#!/usr/bin/env python3
"""com.microsoft MatMulNBits (4-bit weights) on the GPU: kiln against torch's float16 matmul, same GPU, same run.

Each case is one MatMulNBits node made by ONNX Runtime's own MatMulNBitsQuantizer from a float MatMul
with random weights [K, N] (a 7B decoder's projection shapes), built by kiln for CUDA (float16, dynamic
M) and timed by `kiln bench --device-io` (a whole engine run: inputs and outputs on the GPU, CUDA
events, median, the float32 boundary casts included) and by `kiln profile` (the MatMulNBits layers'
GPU time alone) for each M; torch multiplies the same M x K float16 activations by a dense float16
[K, N] weight (what the model would run without 4-bit weights), timed eager (CUDA events around each
call, launch gaps included) and as kernels alone (a CUDA graph of 20 calls replayed, per call). ONNX Runtime's CUDA provider is not on
the GPU machine; kiln's float16 output is compared with onnxruntime's CPU provider on the same model
(float32) for accuracy. Also the 4-bit decoder MLP of bench/cpu_matmulnbits.py at a 7B model's size.

    python3 bench/gpu_matmulnbits.py --kiln BIN/kiln --json out.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from cpu_matmulnbits import matmul_case, mlp_case, quantize  # noqa: E402


def kiln_gpu_ms(kiln: str, engine: str, x: str, n: int, warmup: int):
    out = subprocess.run([kiln, "bench", engine, "--input", f"x={x}", "--device-io", "-n", str(n), "--warmup", str(warmup)],
                         capture_output=True, text=True, check=False)
    m = re.search(r"gpu median ([0-9.]+) ms", out.stdout)
    return float(m.group(1)) if m else None, (out.stderr or out.stdout).strip().splitlines()[-1:] if not m else None


def kiln_layer_ms(kiln: str, engine: str, x: str, tmp: str):
    """The MatMulNBits layers' GPU time per run from `kiln profile` (summed), and their kernel names."""
    out = subprocess.run([kiln, "profile", engine, "-i", f"x={x}", "--runs", "50", "-o", os.path.join(tmp, "prof")],
                         capture_output=True, text=True, check=False)
    total, kernels = 0.0, set()
    for line in out.stdout.splitlines():
        f = line.split()
        if len(f) >= 6 and "MatMulNB" in f[1]:
            total += float(f[4])
            kernels.add(f[2])
    return (total if kernels else None), sorted(kernels)


def torch_ms(fn, n: int, warmup: int, reps: int = 20) -> tuple[float, float]:
    """fn's time per call: eager (CUDA events around each call, launch gaps included), and the kernels
    alone (a CUDA graph of `reps` calls, replayed, events around each replay, divided by reps)."""
    import torch  # noqa: PLC0415

    def timed(call, k):
        times = []
        for _ in range(n):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            call()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) / k)
        return float(np.median(times))

    for _ in range(warmup):
        fn()
    eager = timed(fn, 1)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    for _ in range(warmup):
        g.replay()
    return eager, timed(g.replay, reps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--shapes", default="4096x4096,4096x11008,11008x4096", help="KxN of the single-node cases")
    ap.add_argument("--blocks", default="32,128")
    ap.add_argument("--rows", default="1,4,8,16,64,256,1024")
    ap.add_argument("--mlp", default="4096x11008", help="hidden x ffn of the decoder MLP ('' for none)")
    ap.add_argument("-n", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--json")
    a = ap.parse_args()
    import onnxruntime as ort  # noqa: PLC0415
    import torch  # noqa: PLC0415

    rng = np.random.default_rng(0)
    rows = [int(m) for m in a.rows.split(",")]
    cases = []
    for K, N in ((int(v) for v in s.split("x")) for s in a.shapes.split(",")):
        base = matmul_case(rng, K, N)
        for block in (int(b) for b in a.blocks.split(",")):
            cases.append((f"K{K} N{N} block {block} asym", K, [(K, N)], quantize(base, block, False)))
    if a.mlp:
        hidden, ffn = (int(v) for v in a.mlp.split("x"))
        cases.append((f"decoder MLP {hidden}x{ffn} block 32 asym", hidden, [(hidden, ffn), (hidden, ffn), (ffn, hidden)],
                      quantize(mlp_case(rng, hidden, ffn), 32, False)))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, K, dense, model in cases:
            onnx_path, engine = os.path.join(tmp, "m.onnx"), os.path.join(tmp, "m.kiln")
            with open(onnx_path, "wb") as f:
                f.write(model.SerializeToString())
            b = subprocess.run([a.kiln, "build", onnx_path, "-o", engine, "--device", "cuda", "--precision", "fp16"],
                               capture_output=True, text=True, check=False)
            if b.returncode != 0:
                print(f"{name}: kiln build failed: {b.stderr.strip()}", flush=True)
                continue
            sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            weights = [torch.randn(k, n, device="cuda", dtype=torch.float16) / k ** 0.5 for k, n in dense]
            for M in rows:
                x = rng.standard_normal((M, K)).astype(np.float32)
                xp = os.path.join(tmp, "x.npy")
                np.save(xp, x)
                kms, err = kiln_gpu_ms(a.kiln, engine, xp, a.n, a.warmup)
                # accuracy: kiln's float16 engine against onnxruntime's float32 CPU run of the same model
                r = subprocess.run([a.kiln, "run", engine, "-i", f"x={xp}", "--output-dir", tmp], capture_output=True, text=True,
                                   check=False)
                rel = None
                if r.returncode == 0:
                    got = np.load(os.path.join(tmp, "y.npy")).astype(np.float64)
                    want = sess.run(None, {"x": x})[0].astype(np.float64)
                    rel = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))
                xt = torch.from_numpy(x).to("cuda", torch.float16)
                if len(weights) == 1:
                    fn = lambda: xt @ weights[0]  # noqa: E731
                else:
                    def fn():
                        g = xt @ weights[0]
                        h = torch.nn.functional.silu(g) * (xt @ weights[1])
                        return xt + h @ weights[2]
                with torch.inference_mode():
                    t_eager, t_kernels = torch_ms(fn, a.n, a.warmup)
                lms, kernels = kiln_layer_ms(a.kiln, engine, xp, tmp)
                wbytes = sum(k * n for k, n in dense) // 2
                row = {"case": name, "M": M, "kiln_run_gpu_ms": kms, "kiln_nbits_layers_ms": lms, "kiln_kernels": kernels,
                       "torch_fp16_dense_eager_ms": t_eager, "torch_fp16_dense_kernels_ms": t_kernels,
                       "ratio_run_vs_eager": round(kms / t_eager, 3) if kms else None,
                       "ratio_layers_vs_kernels": round(lms / t_kernels, 3) if lms else None,
                       "kiln_rel_l2_vs_ort_fp32": rel,
                       "kiln_4bit_weight_gbps": round(wbytes / (lms * 1e-3) / 1e9, 1) if lms else None}
                if err:
                    row["error"] = err
                results.append(row)
                print(f"{name:36s} M={M:5d} kiln run {kms if kms else float('nan'):7.4f} ms (4-bit layers "
                      f"{lms if lms else float('nan'):7.4f}, {row['kiln_4bit_weight_gbps']} GB/s of weights)  torch fp16 dense: "
                      f"eager {t_eager:7.4f} ms, kernels {t_kernels:7.4f} ms  layers/kernels {row['ratio_layers_vs_kernels']}  "
                      f"rel L2 vs ORT fp32 {rel if rel is None else f'{rel:.2e}'}  {','.join(kernels)}", flush=True)
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "onnxruntime": ort.__version__,
            "timing": "CUDA events, medians; kiln bench --device-io (whole run) and kiln profile (4-bit layers); "
                      "torch x @ W float16, eager per call and kernels per call (CUDA graph of 20 calls)"}
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "rows": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
