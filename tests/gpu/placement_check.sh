#!/usr/bin/env bash
# CUDA placement and agreement of zoo models, from the repository root with the built binaries in
# BIN_DIR:  MODELS="bert_base gpt2" OPSETS=13,17 tests/gpu/placement_check.sh BIN_DIR OUT_DIR
# Per model and opset (default 17; exported here): the CUDA engine's step summary (cpu steps must be
# integer shape computations on host values), then the CUDA engine against the CPU at batch 1 (third
# run: a CUDA graph replay). Writes OUT_DIR/placement.log.
set -uo pipefail
here=$(dirname "$0")
. "$here/lib.sh"
models="${MODELS:-bert_base distilbert gpt2 vit_b_16 deeplabv3_mobilenet_v3_large}"
OPSETS="${OPSETS:-17}"
{
  date -u +"%Y-%m-%d %H:%M UTC"
  prepare_zoo $models
  for op in ${OPSETS//,/ }; do
    for m in $models; do
      [ "$op" = 17 ] || [ "$op" = 13 ] || continue
      f=build/zoo/${m}_op${op}.onnx
      echo "== $m opset $op"
      "$bin/kiln" build "$f" -o "$out/$m.kiln" --device cuda --no-tune -q > "$out/${m}_build.txt" 2>&1
      grep -E "^steps:" "$out/${m}_build.txt"
      grep -E "^\[cpu\]" "$out/${m}_build.txt" | grep -v "integer shape computation" | head -5
      "$bin/kiln" compare "$f" "$out/$m.kiln" --device-a cpu $(zoo_args $m 1) --runs 3 2>&1 | grep -E "relative L2|rror"
      rm -f "$out/$m.kiln"
    done
  done
} 2>&1 | tee "$out/placement.log"
