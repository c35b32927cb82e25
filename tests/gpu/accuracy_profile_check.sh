#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, from the repository root with the built binaries in BIN_DIR and the
# trained digits CNN in DIGITS_DIR (bench/zoo/digits_cnn.py --out DIGITS_DIR):
#   tests/gpu/accuracy_profile_check.sh BIN_DIR OUT_DIR DIGITS_DIR
# 1. The CUDA unit tests and the allocation tests.
# 2. Real accuracy of each precision's CUDA engine on the digits test set (bench/digits_accuracy.py),
#    and the CPU engine's, against onnxruntime.
# 3. Per-kernel GPU time (Nsight Compute) of ResNet-50 and BERT-base FP16 engines at batch 64
#    (tests/gpu/kernel_profile.sh), with kiln bench figures (GPU-resident, host and CUDA-event times).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
digits=$3
{
  gpu_unit_and_alloc_tests
  echo "== digits CNN: top-1 accuracy per precision (CUDA), and the CPU engine"
  python3 bench/digits_accuracy.py --kiln "$bin/kiln" --data "$digits" --device cuda \
    --precisions fp32,tf32,fp16,bf16,best --json "$out/digits_cuda.json"
  python3 bench/digits_accuracy.py --kiln "$bin/kiln" --data "$digits" --device cpu --json "$out/digits_cpu.json" | tail -n 2
} 2>&1 | tee "$out/accuracy_check.log"
MODELS="${MODELS:-resnet50 bert_base}" bash tests/gpu/kernel_profile.sh "$bin" "$out"
