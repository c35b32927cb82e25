#!/usr/bin/env bash
# CUDA Resize on a machine with an NVIDIA GPU, from the repository root with the built binaries in
# BIN_DIR:  tests/gpu/resize_check.sh BIN_DIR OUT_DIR
# 1. The CUDA unit tests (CudaResize.* against the CPU kernel among them) and the allocation tests.
# 2. DeepLabV3-MobileNetV3 (the zoo model with Resize), exported here at opset 17: CUDA placement
#    (its Resize nodes on the GPU), CUDA engine vs the CPU (FP32, third run = graph replay), FP16
#    engine vs FP32, and batch-1 latency. Writes OUT_DIR/resize.log.
set -uo pipefail
here=$(dirname "$0")
. "$here/lib.sh"
m=deeplabv3_mobilenet_v3_large
{
  gpu_unit_and_alloc_tests
  prepare_zoo $m
  f=build/zoo/${m}_op17.onnx
  echo "== placement (CUDA FP32)"
  "$bin/kiln" build "$f" -o "$out/$m.kiln" --device cuda -q > "$out/${m}_build.txt" 2>&1
  grep -E "Resize|^steps:|^\[cpu\]" "$out/${m}_build.txt" | head -20
  echo "== CUDA FP32 engine vs the CPU (third run)"
  "$bin/kiln" compare "$f" "$out/$m.kiln" --device-a cpu $(zoo_args $m 1) --runs 3 2>&1 | grep -E "relative L2|rror"
  echo "== FP16 engine vs FP32 engine"
  "$bin/kiln" build "$f" -o "$out/${m}_fp16.kiln" --device cuda --precision fp16 -q 2>&1 | grep -E "Resize|^steps:|relative L2"
  echo "== batch 1 latency (kiln bench, CUDA events)"
  for e in "$m" "${m}_fp16"; do
    echo "-- $e"
    "$bin/kiln" bench "$out/$e.kiln" $(zoo_args $m 1) -n 100 --warmup 10 2>&1 | grep -E "median|cuda graphs"
  done
} 2>&1 | tee "$out/resize.log"
