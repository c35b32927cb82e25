#!/usr/bin/env bash
# Where the GPU time goes, on a machine with an NVIDIA GPU, from a folder with the built binaries:
#   tests/gpu/profile_check.sh BIN_DIR OUT_DIR
# Unit and allocation tests, then for ResNet-50 and BERT-base (opt level 2): the fused kiln ops the
# CUDA engine runs, and per-op-type kernel time (KILN_PROFILE=1, CUDA_LAUNCH_BLOCKING=1, no graphs:
# each step's wall time includes its kernels) of the FP32 and FP16 engines at batch 64, with the
# engines' batch 1/64 times (graphs on). Writes OUT_DIR/profile.log.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
models="${MODELS:-resnet50 bert_base}"
{
  gpu_unit_and_alloc_tests
  prepare_zoo $models
  for m in $models; do
    f=build/zoo/${m}_op17.onnx; args=$(zoo_args $m 1); args64=$(zoo_args $m 64)
    for p in fp32 fp16; do
      echo "== $m $p opt level 2"
      "$bin/kiln" build "$f" -o "$out/$m.kiln" --device cuda --opt-level 2 --precision $p > "$out/${m}_${p}_placement.txt" 2>&1
      grep -E "^steps:|rror" "$out/${m}_${p}_placement.txt"
      grep -oE "kiln\.[A-Za-z]+" "$out/${m}_${p}_placement.txt" | sort | uniq -c
      "$bin/kiln" compare "$f" "$out/$m.kiln" --device-a cpu $args --runs 3 --rtol 5e-2 2>&1 | grep -E "relative L2|rror"
      "$bin/kiln" bench "$out/$m.kiln" $args -n 50 --warmup 5 2>&1 | grep -E "median|rror" | sed 's/^/b1: /'
      "$bin/kiln" bench "$out/$m.kiln" $args64 -n 10 --warmup 3 2>&1 | grep -E "median|rror" | sed 's/^/b64: /'
      echo "-- profile, batch 64, no graphs, launch blocking"
      CUDA_LAUNCH_BLOCKING=1 KILN_PROFILE=1 "$bin/kiln" bench "$out/$m.kiln" $args64 -n 5 --warmup 2 \
        --no-cuda-graphs 2>&1 | grep -vE "^(median|min)" | head -40
      rm -f "$out/$m.kiln"
    done
  done
} 2>&1 | tee "$out/profile.log"
