#!/usr/bin/env bash
# tests/gpu/cpu_host_final.sh BIN_DIR OUT_DIR — one call for a stop's CPU work on the device: the
# CUDA unit and allocation tests (the passes that CPU work touched also shape CUDA engines),
# DeepLabV3's CUDA engines (float32 and float16, channels-last concat) against the CPU engine, then
# #13's benchmark on the host CPU pinned to cores 2,3 (tests/gpu/cpu_host_bench.sh's), batch 1.
# SKIP_GPU=1: the benchmark alone.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
[ -n "${SKIP_GPU:-}" ] || gpu_unit_and_alloc_tests || true  # its greps return 1 when nothing failed
cpu_host_setup
export PYTHONPATH=python
m=build/zoo/deeplabv3_mobilenet_v3_large_op17.onnx
for p in ${SKIP_GPU:+none} fp32 fp16; do
  [ "$p" = none ] && break
  echo "== kiln compare $m cpu vs cuda $p"
  "$bin/kiln" compare "$m" --device-b cuda --precision-b "$p" 2>&1 | tail -4 || true  # fp16 exceeds the fp32 tolerance: read its L2
done
echo "== bench/cpu_bench.py pinned to cores 2,3"
taskset -c 2,3 python3 bench/cpu_bench.py --threads 1,2 --batches 1 --budget 6 --max-runs 40 --profile-slow 0 \
  --out "$out/cpu_host.json" 2>&1 | tee "$out/cpu_host_bench.log"
