#!/usr/bin/env bash
# One change's check on the GPU for a few zoo models: the CUDA unit tests named by FILTER, then per
# model (exported with each library's default settings by bench/zoo/export.py) the FP16 engine's
# fused attentions and its output against the CPU float32 engine, its per-kernel profile at batch 64
# (ncu; PROFILE=0 skips it), and bench/gpu_bench.py against torch eager and torch.compile
# (reduce-overhead) at batch 1 and 64. (It replaces default_exports_check.sh, which #40's first
# default-export results name: the same steps with the CUDA attention tests as FILTER.)
#   FILTER='CudaOps.ChannelAffine*' MODELS="densenet121" bash tests/gpu/model_speed_check.sh BIN_DIR OUT_DIR
set -uo pipefail
. "$(dirname "$0")/lib.sh"
models="${MODELS:-densenet121}"
{
  machine_and_unit_tests "${FILTER:-CudaOps.*}"
  prepare_zoo $models
  for m in $models; do
    "$bin/kiln" build build/zoo/${m}_op17.onnx -o /tmp/$m.fp16.kiln --device cuda --precision fp16 -v > "$out/build_$m.txt" 2>&1 ||
      tail -5 "$out/build_$m.txt"
    echo "== $m: $(grep -c 'fused .*attention' "$out/build_$m.txt") attentions fused; fp16 (CUDA) vs float32 (CPU), batch 1"
    "$bin/kiln" compare build/zoo/${m}_op17.onnx /tmp/$m.fp16.kiln --device-a cpu $(zoo_args $m 1) --runs 2 --rtol 5e-2 2>&1 |
      grep -E "relative L2|rror|FAIL|pass"
    if [ "${PROFILE:-1}" != 0 ]; then
      "$bin/kiln" build build/zoo/${m}_op17.onnx -o /tmp/$m.b64.kiln --device cuda --precision fp16 > /dev/null 2>&1
      echo "== per-kernel GPU time, $m fp16 batch 64 (ncu, CUDA graphs off; 3 runs)"
      ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base "$bin/kiln" bench /tmp/$m.b64.kiln \
        $(zoo_args $m 64) -n 1 --warmup 1 --device-io --no-cuda-graphs > "$out/ncu_$m.csv" 2> "$out/ncu_$m.err"
      python3 tests/gpu/kernel_table.py "$out/ncu_$m.csv" --runs 3 --width 90 | head -16
      rm -f "$out/ncu_$m.csv"
    fi
  done
} 2>&1 | tee "$out/model_speed_check.log"
for m in $models; do
  python3 bench/gpu_bench.py --kiln "$bin/kiln" --models $m --batches ${BATCHES:-1,64} --precisions fp16 \
    --compile-modes reduce-overhead --json "$out/gpu_fp16_$m.json" > "$out/gpu_fp16_$m.log" 2>&1
  grep -A4 "CUDA events" "$out/gpu_fp16_$m.log" | grep -E "^\| $m|^\| model"
done 2>&1 | tee -a "$out/model_speed_check.log"
