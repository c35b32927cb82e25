#!/usr/bin/env bash
# FP8 (--precision fp8) on a Hopper GPU, run from the repository root with the built binaries in
# .carry/:  bash tests/gpu/fp8_check.sh   (OUT is the folder for results)
# 1. The CUDA unit tests (kiln.F8MatMul against its reference, every cuBLASLt tactic) and the
#    allocation tests.
# 2. bench/gpu_bench.py for BERT-base and then ViT-B/16: FP16 and FP8 engines at batch 1 and 64
#    against PyTorch FP16 eager and torch.compile (reduce-overhead) in the same run; the FP8 build's
#    report (products in FP8, relative L2 against the float32 engine on a calibration set).
set -uo pipefail
. tests/gpu/lib.sh .carry $OUT/r
{
  gpu_unit_and_alloc_tests
  prepare_zoo ${MODELS:-bert_base vit_b_16}
} 2>&1 | tee "$out/fp8_check.log"
for m in ${MODELS:-bert_base vit_b_16}; do
  python3 bench/gpu_bench.py --kiln .carry/kiln --models $m --batches 1,64 --precisions fp16,fp8 \
    --compile-modes reduce-overhead --json "$out/gpu_fp8_$m.json" > "$out/gpu_fp8_$m.log" 2>&1
  grep -E "^\| |build_report" "$out/gpu_fp8_$m.log" | head -40
  grep -o '"build_report": \[[^]]*\]' "$out/gpu_fp8_$m.json" | head -1
done
