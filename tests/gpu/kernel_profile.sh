#!/usr/bin/env bash
# Per-kernel GPU time of one run (Nsight Compute's gpu__time_duration, clocks left alone; CUDA
# graphs off so each kernel is seen) for zoo models, from a folder with the built binaries:
#   MODELS="bert_base mobilenet_v2" PRECISION=fp16 BATCH=64 tests/gpu/kernel_profile.sh BIN_DIR OUT_DIR
# Writes OUT_DIR/kernel_profile.log (tables by kernel name, tests/gpu/kernel_table.py).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
models="${MODELS:-resnet50 bert_base}"
prec="${PRECISION:-fp16}"
batch="${BATCH:-64}"
{
  prepare_zoo $models
  for m in $models; do
    "$bin/kiln" build build/zoo/${m}_op17.onnx -o "$out/$m.kiln" --device cuda --opt-level 2 --precision $prec > /dev/null 2>&1
    "$bin/kiln" bench "$out/$m.kiln" $(zoo_args $m $batch) -n 20 --warmup 5 --device-io 2>&1 | grep -E "median|rror"
    echo "== per-kernel GPU time, $m $prec batch $batch (ncu; kiln bench -n 1 --warmup 1 makes 3 runs)"
    ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base "$bin/kiln" bench "$out/$m.kiln" \
      $(zoo_args $m $batch) -n 1 --warmup 1 --device-io --no-cuda-graphs > "$out/ncu_$m.csv" 2> "$out/ncu_$m.err"
    python3 tests/gpu/kernel_table.py "$out/ncu_$m.csv" --runs 3 --width 90 --top 28
    rm -f "$out/$m.kiln" "$out/ncu_$m.csv"
  done
} 2>&1 | tee "$out/kernel_profile.log"
