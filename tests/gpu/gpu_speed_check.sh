#!/usr/bin/env bash
# GPU speed check (CUDA graphs, fused kernels) on a machine with an NVIDIA GPU, from a folder with
# the built binaries:  tests/gpu/gpu_speed_check.sh BIN_DIR OUT_DIR
# BIN_DIR has kiln, kiln_tests, kiln_alloc_tests, libkiln.so (+ shared libraries the machine lacks).
# Runs the CUDA unit tests and the allocation tests (graphs replayed with no allocation), exports
# ResNet-50, MobileNetV2, BERT-base and GPT-2 with the machine's PyTorch, and for each, at opt levels 1
# and 2 (fusions), FP32 and FP16: compares the CUDA engine's third run (a replayed CUDA graph) with
# the CPU engine, and times batch 1 with and without CUDA graphs. Writes OUT_DIR/gpu_speed.log.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
models="${MODELS:-resnet50 mobilenet_v2 bert_base gpt2}"
{
  gpu_unit_and_alloc_tests
  echo "== export"
  prepare_zoo $models
  for m in $models; do
    f=build/zoo/${m}_op17.onnx
    [ -f "$f" ] || { echo "== $m: not exported"; continue; }
    args=$(zoo_args $m 1); args64=$(zoo_args $m 64)
    for lvl in 1 2; do
      echo "== $m opt level $lvl: CUDA FP32 build"
      "$bin/kiln" build "$f" -o "$out/$m.kiln" --device cuda --opt-level $lvl > "$out/${m}_o${lvl}_placement.txt" 2>&1
      grep -E "^steps:|rror" "$out/${m}_o${lvl}_placement.txt"
      grep -E "^\[cpu\]" "$out/${m}_o${lvl}_placement.txt" | grep -v "integer shape computation" | head -5
      grep -oE "kiln\.Fused[A-Za-z]+|kiln\.SkipLayerNorm" "$out/${m}_o${lvl}_placement.txt" | sort | uniq -c
      echo "-- CPU engine (opt level $lvl) vs CUDA engine, third run (graph replay), batch 1"
      "$bin/kiln" compare "$f" "$out/$m.kiln" --device-a cpu $args --runs 3 2>&1 | grep -E "relative L2|rror"
      echo "-- CUDA FP32 batch 1: graphs / no graphs"
      "$bin/kiln" bench "$out/$m.kiln" $args -n 50 --warmup 5 2>&1 | grep -E "cuda graphs|median|rror"
      "$bin/kiln" bench "$out/$m.kiln" $args -n 50 --warmup 5 --no-cuda-graphs 2>&1 | grep -E "median|rror"
      echo "-- CUDA FP32 batch 64 (graphs)"
      "$bin/kiln" bench "$out/$m.kiln" $args64 -n 10 --warmup 3 2>&1 | grep -E "median|rror"
      echo "-- FP16 engine: accuracy against the FP32 CUDA engine (third runs), batch 1 and 64 times"
      "$bin/kiln" build "$f" -o "$out/${m}_fp16.kiln" --device cuda --opt-level $lvl --precision fp16 2>&1 | grep -E "^steps:|rror"
      "$bin/kiln" compare "$out/$m.kiln" "$out/${m}_fp16.kiln" $args --runs 3 --rtol 5e-3 2>&1 | grep -E "relative L2|rror"
      "$bin/kiln" bench "$out/${m}_fp16.kiln" $args -n 50 --warmup 5 2>&1 | grep -E "median|rror"
      "$bin/kiln" bench "$out/${m}_fp16.kiln" $args64 -n 10 --warmup 3 2>&1 | grep -E "median|rror" | sed 's/^/batch 64: /'
      rm -f "$out/$m.kiln" "$out/${m}_fp16.kiln"
    done
  done
  if [ -f build/zoo/resnet50_op17.onnx ]; then
    echo "== cuDNN's log for ResNet-50 FP16 batch 64 (the first convolution failed there before)"
    "$bin/kiln" build build/zoo/resnet50_op17.onnx -o "$out/r16.kiln" --device cuda --precision fp16 > /dev/null 2>&1
    CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr "$bin/kiln" run "$out/r16.kiln" \
      --input input=build/inputs/resnet50_input_b64.npy 2>&1 | grep -iE "error|bad_param|fail|warn" | head -20
    rm -f "$out/r16.kiln"
  fi
} 2>&1 | tee "$out/gpu_speed.log"
