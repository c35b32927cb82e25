#!/usr/bin/env bash
# FP8 (--precision fp8) on a Hopper GPU, run from the repository root with the built binaries in
# .carry/ (and the trained digits MLP of bench/zoo/digits_cnn.py --arch mlp in .carry/digits):
#   bash tests/gpu/fp8_check.sh   (OUT is the folder for results)
# 1. The CUDA unit tests (kiln.F8MatMul against its reference, every cuBLASLt tactic) and the
#    allocation tests.
# 2. bench/gpu_bench.py for each of MODELS (default BERT-base, ViT-B/16, GPT-2): FP16 and FP8 engines
#    at batch 1 and 64 against PyTorch FP16 eager and torch.compile (reduce-overhead) in the same run;
#    the FP8 build's report (products in FP8, relative L2 against the float32 engine on a calibration
#    set). One JSON per model, one log for all.
# 3. Top-1 accuracy of the digits MLP's CUDA engines (fp32, fp16, fp8) on its 360 test images.
set -uo pipefail
. tests/gpu/lib.sh .carry $OUT/r
models=${MODELS:-bert_base vit_b_16 gpt2}
{
  gpu_unit_and_alloc_tests
  prepare_zoo $models
} 2>&1 | tee "$out/fp8_check.log"
for m in $models; do
  python3 bench/gpu_bench.py --kiln .carry/kiln --models $m --batches 1,64 --precisions fp16,fp8 \
    --compile-modes reduce-overhead --json "$out/gpu_fp8_$m.json" >> "$out/gpu_fp8.log" 2>&1
  grep -o '"build_report": \[[^]]*\]' "$out/gpu_fp8_$m.json" | head -1
done
grep -E "^\| |^$|GPU-resident|ms per call" "$out/gpu_fp8.log" | tail -60
if [ -f .carry/digits/digits_mlp.onnx ]; then
  python3 bench/digits_accuracy.py --kiln .carry/kiln --data .carry/digits --device cuda --model digits_mlp \
    --precisions fp32,fp16,fp8 --json "$out/digits_mlp_cuda.json" 2>&1 | tail -8
fi
