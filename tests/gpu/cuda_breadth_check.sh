#!/usr/bin/env bash
# CUDA breadth check on a machine with an NVIDIA GPU, from a folder holding the built binaries:
#   [PRECISIONS="fp16 bf16"] tests/gpu/cuda_breadth_check.sh BIN_DIR OUT_DIR [OPSETS]
# BIN_DIR has kiln, kiln_tests, kiln_alloc_tests, libkiln.so (+ shared libraries the machine lacks).
# Runs the CUDA unit tests (every CUDA kernel against the CPU kernels, float32/float16/bfloat16 and
# integer types), exports the nine zoo models with the machine's PyTorch, and for each: builds a CUDA
# engine (placement summary and every step left on the CPU, with its reason), compares its outputs
# with the CPU engine's on the same inputs, and times batch 1 (and batch 64 for ResNet-50/BERT-base)
# next to PyTorch eager FP32 on the same GPU; with PRECISIONS, also builds those reduced-precision
# engines, compares them with the FP32 engine and times them. Writes OUT_DIR/cuda_breadth.log.
set -uo pipefail
opsets=${3:-17}
. "$(dirname "$0")/lib.sh"
models="resnet50 mobilenet_v2 efficientnet_b0 convnext_tiny vit_b_16 deeplabv3_mobilenet_v3_large bert_base distilbert gpt2"
{
  gpu_unit_and_alloc_tests
  echo "== export the zoo (opsets $opsets)"
  python3 bench/zoo/export.py --models "${models// /,}" --opsets "${opsets// /,}" 2>&1 | grep -E "export:|rror" | tail -20
  save_zoo_inputs
  for opset in $opsets; do
    for m in $models; do
      f=build/zoo/${m}_op$opset.onnx
      [ -f "$f" ] || { echo "== $m op$opset: not exported"; continue; }
      args=()
      for npy in build/inputs/${m}_*_b1.npy; do
        k=$(basename "$npy" _b1.npy); k=${k#${m}_}
        args+=(--input "$k=$npy")
      done
      echo "== $m op$opset: CUDA build"
      "$bin/kiln" build "$f" -o "$out/$m.kiln" --device cuda > "$out/${m}_op${opset}_placement.txt" 2>&1
      grep -E "^steps:|^arena|^built|rror" "$out/${m}_op${opset}_placement.txt"
      grep -E "^\[cpu\]" "$out/${m}_op${opset}_placement.txt" | grep -v "integer shape computation" | head -20
      echo "-- CPU vs CUDA outputs, batch 1"
      "$bin/kiln" compare "$f" --device-a cpu --device-b cuda "${args[@]}" 2>&1 | tail -4
      echo "-- CUDA batch 1"
      "$bin/kiln" bench "$out/$m.kiln" "${args[@]}" -n 30 --warmup 5 2>&1 | tail -2
      args64=()
      if [ "$m" = resnet50 ] || [ "$m" = bert_base ]; then
        for npy in build/inputs/${m}_*_b64.npy; do
          k=$(basename "$npy" _b64.npy); k=${k#${m}_}
          args64+=(--input "$k=$npy")
        done
        echo "-- CUDA batch 64"
        "$bin/kiln" bench "$out/$m.kiln" "${args64[@]}" -n 20 --warmup 3 2>&1 | tail -2
      fi
      if [ -n "${PRECISIONS:-}" ]; then
        for prec in $PRECISIONS; do
          echo "-- $prec engine: placement, accuracy against the FP32 CUDA engine, batch 1 time"
          "$bin/kiln" build "$f" -o "$out/${m}_$prec.kiln" --device cuda --precision "$prec" 2>&1 | grep -E "^steps:|rror"
          "$bin/kiln" compare "$out/$m.kiln" "$out/${m}_$prec.kiln" "${args[@]}" --rtol 5e-3 2>&1 | grep -E "relative L2|rror"
          "$bin/kiln" bench "$out/${m}_$prec.kiln" "${args[@]}" -n 30 --warmup 5 2>&1 | tail -1
          if [ "$m" = resnet50 ] || [ "$m" = bert_base ]; then
            "$bin/kiln" bench "$out/${m}_$prec.kiln" "${args64[@]}" -n 20 --warmup 3 2>&1 | tail -1 | sed 's/^/batch 64: /'
          fi
          rm -f "$out/${m}_$prec.kiln"
        done
      fi
      rm -f "$out/$m.kiln"
    done
  done
  echo "== PyTorch eager FP32, same GPU (CUDA events, median)"
  python3 tests/gpu/torch_eager.py
} 2>&1 | tee "$out/cuda_breadth.log"
