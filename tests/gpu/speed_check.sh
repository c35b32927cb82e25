#!/usr/bin/env bash
# The float16 engines of zoo models on the GPU against the CPU float32 engine (kiln compare: relative
# L2 of every output at batch 1), then bench/gpu_bench.py side by side with PyTorch. From the
# repository root with the built binaries in .carry/ (OUT: the results folder):
#   MODELS="bert_base resnet50" bash tests/gpu/speed_check.sh
set -uo pipefail
. tests/gpu/lib.sh .carry $OUT/r
models="${MODELS:-gpt2 vit_b_16 bert_base resnet50}"
{
  date -u +"%Y-%m-%d %H:%M UTC"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  prepare_zoo $models
  for m in $models; do
    "$bin/kiln" build build/zoo/${m}_op17.onnx -o /tmp/$m.fp16.kiln --device cuda --precision fp16 -v > "$out/build_$m.txt" 2>&1 ||
      tail -5 "$out/build_$m.txt"
    grep -E "pad-matmul|fuse-attention" "$out/build_$m.txt" | head -3
    echo "== $m fp16 (CUDA) vs float32 (CPU), batch 1"
    "$bin/kiln" compare build/zoo/${m}_op17.onnx /tmp/$m.fp16.kiln --device-a cpu $(zoo_args $m 1) --runs 2 --rtol 5e-2 2>&1 |
      grep -E "relative L2|rror|FAIL|pass"
  done
} 2>&1 | tee "$out/speed_check.log"
for m in ${BENCH_MODELS:-}; do
  python3 bench/gpu_bench.py --kiln "$bin/kiln" --models $m --batches 1,64 --precisions fp16 --compile-modes reduce-overhead \
    --json "$out/gpu_fp16_$m.json" > "$out/gpu_fp16_$m.log" 2>&1
  grep -E "^\| $m" "$out/gpu_fp16_$m.log"
done
