#!/usr/bin/env bash
# Where an FP8 engine's time goes, against the FP16 engine (run from the repository root with the
# built binaries in .carry/):  bash tests/gpu/fp8_profile.sh   (OUT is the folder for results)
# The kiln.F8MatMul unit tests, then for MODEL (default bert_base) at BATCH (default 64): FP16 and FP8
# engines, `kiln profile` of each (per-layer device times), summed per op, and `kiln bench`.
set -uo pipefail
. tests/gpu/lib.sh .carry $OUT/r
m=${MODEL:-bert_base}; b=${BATCH:-64}
{
  date -u +"%Y-%m-%d %H:%M UTC"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  .carry/kiln_tests --gtest_filter='CudaF8*:CudaMatMul*:CudaGemm*' 2>&1 | grep -E -A3 "^\[ +(OK|FAILED|PASSED) +\]|Failure" | head -40
  prepare_zoo $m
  python3 - "$m" <<'PY'
import os, sys
import numpy as np
sys.path.insert(0, "bench/zoo")
import zoo
name = sys.argv[1]
for s in range(1, 5):
    d = f"build/calib_{name}/set{s:02d}"
    os.makedirs(d, exist_ok=True)
    for k, v in zoo.make_inputs(zoo.MODELS[name], 4, seed=s).items():
        np.save(f"{d}/{k}.npy", v)
PY
  for p in fp16 fp8; do
    extra=""; [ $p = fp8 ] && extra="--calibration build/calib_$m"
    .carry/kiln build build/zoo/${m}_op17.onnx -o /tmp/$m.$p.kiln --device cuda --opt-level 2 --precision $p $extra \
      --no-accuracy-check -v > "$out/build_${m}_$p.txt" 2>&1 || tail -5 "$out/build_${m}_$p.txt"
    grep -E "^fp8:" "$out/build_${m}_$p.txt"
    grep -iE "fuse-attention|fuse-gelu" "$out/build_${m}_$p.txt" | sort | uniq -c | sort -rn | head -6
    .carry/kiln profile /tmp/$m.$p.kiln $(zoo_args $m $b) --runs 10 -o /tmp/prof_$p > "$out/profile_${m}_$p.txt" 2>&1
    echo "== $p batch $b: per op (ms per run, steps per run; from the trace)"
    python3 - /tmp/prof_$p.json <<'PY'
import json, sys, collections
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X" and "op_name" in e.get("args", {})]
runs = len({e["args"]["run"] for e in ev}) or 1
by_op, count, shapes = collections.Counter(), collections.Counter(), collections.defaultdict(collections.Counter)
for e in ev:
    op = e["args"]["op_name"]
    by_op[op] += e["dur"] / 1000 / runs
    count[op] += 1 / runs
    if "MatMul" in op:
        shapes[op][" x ".join(e["args"]["input_type_shape"][:2])] += e["dur"] / 1000 / runs
for op, t in by_op.most_common(12):
    print(f"  {op:24s} {t:8.3f} {count[op]:5.0f}")
for op, c in shapes.items():
    for shp, t in c.most_common(4):
        print(f"  {op:24s} {shp:60s} {t:8.3f}")
PY
    grep -E "median" "$out/profile_${m}_$p.txt"
    .carry/kiln bench /tmp/$m.$p.kiln $(zoo_args $m $b) -n 20 --warmup 5 --device-io 2>&1 | grep -E "median|rror"
  done
} 2>&1 | tee "$out/fp8_profile.log"
