#!/usr/bin/env bash
# Transformer check on a machine with an NVIDIA GPU, run from the repository root with the built
# binaries in .carry/:  bash tests/gpu/attention_check.sh   (OUT is the folder for results)
# For BERT-base, GPT-2 and DistilBERT at opt level 2: placement (which fused kiln ops the CUDA
# engine runs), the CUDA engine's third run (graph replay) against the CPU engine at batch 1 and 64,
# FP16 against FP32, and batch 1/64 times.
set -uo pipefail
. tests/gpu/lib.sh .carry $OUT/r
save_zoo_inputs
for m in bert_base gpt2 distilbert; do
  [ -f build/zoo/${m}_op17.onnx ] || python3 bench/zoo/export.py --models $m --opsets 17 > /dev/null 2>&1
  f=build/zoo/${m}_op17.onnx; args=$(zoo_args $m 1); args64=$(zoo_args $m 64)
  echo "== $m opt level 2"
  .carry/kiln build $f -o /tmp/$m.kiln --device cuda --opt-level 2 > $OUT/r/${m}_placement.txt 2>&1
  grep -E "^steps:" $OUT/r/${m}_placement.txt; grep -oE "kiln\.[A-Za-z]+" $OUT/r/${m}_placement.txt | sort | uniq -c
  .carry/kiln compare $f /tmp/$m.kiln --device-a cpu $args --runs 3 2>&1 | grep -E "relative L2|rror"
  .carry/kiln compare $f /tmp/$m.kiln --device-a cpu $args64 --runs 3 2>&1 | grep -E "relative L2|rror" | sed 's/^/b64 /'
  .carry/kiln bench /tmp/$m.kiln $args -n 50 --warmup 5 2>&1 | grep median | sed 's/^/fp32 b1: /'
  .carry/kiln bench /tmp/$m.kiln $args64 -n 10 --warmup 3 2>&1 | grep median | sed 's/^/fp32 b64: /'
  .carry/kiln build $f -o /tmp/${m}16.kiln --device cuda --opt-level 2 --precision fp16 > /dev/null 2>&1
  .carry/kiln compare /tmp/$m.kiln /tmp/${m}16.kiln $args --runs 3 --rtol 5e-3 2>&1 | grep -E "relative L2|rror" | sed 's/^/fp16 vs fp32: /'
  .carry/kiln bench /tmp/${m}16.kiln $args -n 50 --warmup 5 2>&1 | grep median | sed 's/^/fp16 b1: /'
  .carry/kiln bench /tmp/${m}16.kiln $args64 -n 10 --warmup 3 2>&1 | grep median | sed 's/^/fp16 b64: /'
done
