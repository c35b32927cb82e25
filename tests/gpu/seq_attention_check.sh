#!/usr/bin/env bash
# Sequence-first attention (torch's nn.MultiheadAttention as ViT exports it) on a machine with an
# NVIDIA GPU, from the repository root with the built binaries in .carry/ (OUT: the results folder):
#   bash tests/gpu/seq_attention_check.sh
# The CUDA unit tests (kiln.Attention with sequence_first = 1 for every kernel among them), ViT-B/16
# as the machine's PyTorch exports it: how many attentions fuse, the FP32 and FP16 CUDA engines
# against the CPU engine (float32 CUDA engines keep attention unfused by design: runtime/engine.cpp),
# then bench/gpu_bench.py against PyTorch eager and torch.compile.
set -uo pipefail
. tests/gpu/lib.sh .carry $OUT/r
{
  gpu_unit_and_alloc_tests
  prepare_zoo vit_b_16
  m=vit_b_16
  for prec in fp32 fp16; do
    flags=""
    [ $prec = fp16 ] && flags="--precision fp16"
    "$bin/kiln" build build/zoo/${m}_op17.onnx -o /tmp/$m.$prec.kiln --device cuda $flags -v > "$out/build_${m}_$prec.txt" 2>&1 ||
      tail -5 "$out/build_${m}_$prec.txt"
    echo "== $m $prec: $(grep -c 'fused sequence-first attention' "$out/build_${m}_$prec.txt") sequence-first attentions fused"
    grep -E "near miss.*attention" "$out/build_${m}_$prec.txt" | head -3
    echo "== $m $prec (CUDA) vs float32 (CPU), batch 1"
    "$bin/kiln" compare build/zoo/${m}_op17.onnx /tmp/$m.$prec.kiln --device-a cpu $(zoo_args $m 1) --runs 2 --rtol 5e-2 2>&1 |
      grep -E "relative L2|rror|FAIL|pass"
  done
} 2>&1 | tee "$out/seq_attention_check.log"
python3 bench/gpu_bench.py --kiln "$bin/kiln" --models vit_b_16 --batches 1,64 --precisions fp16 --compile-modes reduce-overhead \
  --json "$out/gpu_fp16_vit_b_16.json" > "$out/gpu_fp16_vit_b_16.log" 2>&1
grep -E "^\| vit_b_16" "$out/gpu_fp16_vit_b_16.log"
