#!/usr/bin/env bash
# BERT-base INT8 on the GPU with a float16 rest, on a machine with an NVIDIA GPU, from the repository
# root with the built binaries in .carry/ (OUT: the results folder):
#   OUT=... [UNIT=1] bash tests/gpu/int8_bert_check.sh
# 1. (UNIT=1) the int8 product's and quantization's CUDA unit tests;
# 2. `kiln build --int8 --precision fp16` from a calibration folder (8 sets of 4, seeds 1-8), verbose:
#    the fusions' near misses on attention, what runs where;
# 3. against the float32 CPU engine at batch 1; GPU-resident latency at batch 1 and 64;
# 4. the per-kernel GPU time at batch 64 (Nsight Compute, tests/gpu/kernel_table.py).
set -uo pipefail
. tests/gpu/lib.sh .carry $OUT/r
m=bert_base
{
  date -u +"%Y-%m-%d %H:%M UTC"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  if [ -n "${UNIT:-}" ]; then
    "$bin/kiln_tests" --gtest_filter="${UNIT_FILTER:-CudaQMatMul.*:CudaBreadth.*Quantiz*}" 2>&1 |
      grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) +\]|Failure|Which is|Expected|element|got" | head -40
  fi
  prepare_zoo $m > /dev/null 2>&1
  python3 - <<'PY'
import os, sys
import numpy as np
sys.path.insert(0, "bench/zoo")
import zoo
for i in range(1, 9):
    os.makedirs(f"build/calib/bert_base/set{i}", exist_ok=True)
    for k, v in zoo.make_inputs(zoo.MODELS["bert_base"], 4, seed=i).items():
        np.save(f"build/calib/bert_base/set{i}/{k}.npy", v)
PY
  "$bin/kiln" build build/zoo/${m}_op17.onnx -o /tmp/bi8.kiln --device cuda --int8 --precision fp16 \
      --calibration build/calib/$m -v > "$out/build_int8.txt" 2>&1 || tail -5 "$out/build_int8.txt"
  grep -E "^int8|relative L2" "$out/build_int8.txt" | head -4
  grep "near miss: fuse-attention" "$out/build_int8.txt" | head -3
  "$bin/kiln" inspect /tmp/bi8.kiln -v > "$out/inspect_int8.txt" 2>&1
  grep -oE "(cuda|cpu)\.[A-Za-z0-9_.]+" "$out/inspect_int8.txt" | sort | uniq -c | sort -rn | head -14
  "$bin/kiln" compare build/zoo/${m}_op17.onnx /tmp/bi8.kiln --device-a cpu $(zoo_args $m 1) --rtol 5e-2 2>&1 |
    grep -E "relative L2|rror|FAIL|pass" | head -4
  for b in 1 64; do
    printf "%s batch %s int8: " $m $b
    "$bin/kiln" bench /tmp/bi8.kiln $(zoo_args $m $b) --device-io -n 30 --warmup 5 2>&1 | grep -E "^median|rror" | head -1
  done
  echo "-- int8 batch 64 per kernel (ncu; kiln bench -n 1 --warmup 1 makes 3 runs)"
  ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base "$bin/kiln" bench /tmp/bi8.kiln \
    $(zoo_args $m 64) -n 1 --warmup 1 --device-io --no-cuda-graphs > "$out/ncu.csv" 2> /dev/null
  python3 tests/gpu/kernel_table.py "$out/ncu.csv" --runs 3 --width 100 | head -26
  rm -f "$out/ncu.csv"
} 2>&1 | tee "$out/int8_bert_check.log"
