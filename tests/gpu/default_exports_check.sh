#!/usr/bin/env bash
# #40's default-export models on the GPU: the CUDA attention unit tests, then for each model (zoo names;
# exported with each library's default settings by bench/zoo/export.py) the FP16 engine against the
# CPU float32 engine, its fusions, and bench/gpu_bench.py against torch eager and torch.compile.
# From the repository root with the built binaries in .carry/ (OUT: the results folder):
#   MODELS="vit_base_patch16_224 swin_tiny_patch4_window7_224" bash tests/gpu/default_exports_check.sh
set -uo pipefail
. tests/gpu/lib.sh .carry $OUT/r
models="${MODELS:-vit_base_patch16_224 swin_tiny_patch4_window7_224}"
{
  machine_and_unit_tests 'Cuda*:*Attention*:Runtime.Cuda*'
  prepare_zoo $models
  for m in $models; do
    "$bin/kiln" build build/zoo/${m}_op17.onnx -o /tmp/$m.fp16.kiln --device cuda --precision fp16 -v > "$out/build_$m.txt" 2>&1 ||
      tail -5 "$out/build_$m.txt"
    echo "== $m: $(grep -c 'fused .*attention' "$out/build_$m.txt") attentions fused; fp16 (CUDA) vs float32 (CPU), batch 1"
    "$bin/kiln" compare build/zoo/${m}_op17.onnx /tmp/$m.fp16.kiln --device-a cpu $(zoo_args $m 1) --runs 2 --rtol 5e-2 2>&1 |
      grep -E "relative L2|rror|FAIL|pass"
  done
} 2>&1 | tee "$out/default_exports_check.log"
for m in $models; do
  python3 bench/gpu_bench.py --kiln "$bin/kiln" --models $m --batches 1,64 --precisions fp16 --compile-modes reduce-overhead \
    --json "$out/gpu_fp16_$m.json" > "$out/gpu_fp16_$m.log" 2>&1
  grep -A4 "CUDA events" "$out/gpu_fp16_$m.log" | grep -E "^\| $m"
done
