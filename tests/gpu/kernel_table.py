"""Per-kernel GPU time from Nsight Compute's CSV (ncu --metrics gpu__time_duration.sum --csv
--print-units base): kernels grouped by name, total time per run, share, count; then where the time
goes by kind (library products and convolutions, library attention, generated kernels, kiln's own
kernels, other).
    python3 tests/gpu/kernel_table.py ncu.csv --runs N
(--runs: how many runs the profiled program made, to report per-run figures.)"""
from __future__ import annotations

import argparse
import csv
import io
import re
import signal
from collections import defaultdict


# Kinds of kernels by name (first match wins): cuBLAS/cuBLASLt's GEMMs (nvjet, *gemm*, xmma, CUTLASS),
# cuDNN's fused attention and its convolutions, code generated at build time (kiln.Pointwise's
# NVRTC kernels; Inductor's Triton kernels on torch's side), kiln's hand-written CUDA kernels.
KINDS = (
    ("library attention (cuDNN SDPA)", re.compile(r"sdpa|flash_fprop|fmha", re.I)),
    ("library products (cuBLAS/cuBLASLt/CUTLASS)", re.compile(r"nvjet|gemm|xmma|cutlass|cublas", re.I)),
    ("library convolutions and other cuDNN", re.compile(r"cudnn|conv|implicit_", re.I)),
    ("generated (kiln.Pointwise / Triton)", re.compile(r"kiln_pointwise|^triton_", re.I)),
    ("kiln's own kernels", re.compile(r"kiln::")),
)


def kind_of(name: str) -> str:
    for kind, pattern in KINDS:
        if pattern.search(name):
            return kind
    return "other"


def main() -> None:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--width", type=int, default=70)
    ap.add_argument("--top", type=int, default=0, help="list only the N kernels with the most time (0: all)")
    a = ap.parse_args()
    text = open(a.csv, encoding="utf-8", errors="replace").read()
    start = text.find('"ID"')
    if start < 0:
        print("no kernel rows in", a.csv)
        return
    total, count = defaultdict(float), defaultdict(int)
    for row in csv.DictReader(io.StringIO(text[start:])):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = re.sub(r"\s+", " ", row["Kernel Name"])
        total[name] += float(row["Metric Value"].replace(",", ""))  # nanoseconds
        count[name] += 1
    grand = sum(total.values())
    print(f"{'kernel':<{a.width}} {'calls/run':>9} {'us/run':>10} {'%':>6}")
    for name, ns in sorted(total.items(), key=lambda kv: -kv[1])[: a.top or None]:
        short = name if len(name) <= a.width else name[: a.width - 3] + "..."
        print(f"{short:<{a.width}} {count[name] / a.runs:>9.1f} {ns / 1e3 / a.runs:>10.1f} {100 * ns / grand:>6.1f}")
    print(f"{'total':<{a.width}} {sum(count.values()) / a.runs:>9.1f} {grand / 1e3 / a.runs:>10.1f}")
    by_kind, kind_count = defaultdict(float), defaultdict(int)
    for name, ns in total.items():
        by_kind[kind_of(name)] += ns
        kind_count[kind_of(name)] += count[name]
    print(f"\n{'where the time goes':<{a.width}} {'calls/run':>9} {'us/run':>10} {'%':>6}")
    for kind, ns in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"{kind:<{a.width}} {kind_count[kind] / a.runs:>9.1f} {ns / 1e3 / a.runs:>10.1f} {100 * ns / grand:>6.1f}")


if __name__ == "__main__":
    main()
