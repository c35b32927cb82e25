#!/usr/bin/env bash
# Precisions on a machine with an NVIDIA GPU, from a folder with the built binaries:
#   tests/gpu/precision_check.sh BIN_DIR OUT_DIR
# CUDA unit tests and allocation tests; then ResNet-50 and BERT-base (opt level 2) built at each
# precision (fp32, tf32, fp16, bf16, best): the build's accuracy report against a float32 engine,
# batch 1 and 64 times. Writes OUT_DIR/precision.log.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
models="${MODELS:-resnet50 bert_base}"
{
  gpu_unit_and_alloc_tests
  prepare_zoo $models
  for m in $models; do
    args=$(zoo_args $m 1); args64=$(zoo_args $m 64)
    for p in fp32 tf32 fp16 bf16 best; do
      echo "== $m $p"
      "$bin/kiln" build build/zoo/${m}_op17.onnx -o "$out/$m.kiln" --device cuda --opt-level 2 --precision $p 2>&1 |
        grep -E "relative L2|rror|not run"
      "$bin/kiln" bench "$out/$m.kiln" $args -n 50 --warmup 5 2>&1 | grep -E "median|rror" | sed 's/^/b1: /'
      "$bin/kiln" bench "$out/$m.kiln" $args64 -n 10 --warmup 3 2>&1 | grep -E "median|rror" | sed 's/^/b64: /'
    done
    rm -f "$out/$m.kiln"
  done
} 2>&1 | tee "$out/precision.log"
