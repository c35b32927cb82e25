#!/usr/bin/env bash
# kiln.Attention's masked path on the GPU (staged mask tiles, warps skipping tiles that are -inf for
# all their rows): the attention unit tests, kiln.Attention alone on long causal and short masked
# shapes (a one-node model, tests/gpu/attention_micro.py), and GPT-2 and BERT-base FP16 at batch 64 —
# each timed with the binaries in BIN_DIR and, when OLD_DIR holds an earlier build's
# libkiln_cuda.so, with that library in a copy of BIN_DIR beside it (ncu, per-kernel GPU time).
#   bash tests/gpu/attention_mask_check.sh BIN_DIR OUT_DIR [OLD_DIR]
set -uo pipefail
. "$(dirname "$0")/lib.sh"
old=${3:-}
variants="N"
if [ -n "$old" ]; then
  rm -rf /tmp/kiln_old_bin && cp -r "$bin" /tmp/kiln_old_bin && cp "$old/libkiln_cuda.so" /tmp/kiln_old_bin/
  variants="O N"
fi
dir_of() { [ "$1" = O ] && echo /tmp/kiln_old_bin || echo "$bin"; }
kernel_us() {  # variant, engine, extra bench args...: the attention kernels' GPU time per run
  local b; b=$(dir_of "$1"); local e=$2; shift 2
  LD_LIBRARY_PATH=$b ncu --clock-control none -k regex:attention --metrics gpu__time_duration.sum --csv --print-units base \
    "$b/kiln" bench "$e" "$@" -n 1 --warmup 1 --device-io --no-cuda-graphs > "$out/ncu.csv" 2> /dev/null
  python3 "$(dirname "$0")/kernel_table.py" "$out/ncu.csv" --runs 3 --width 80 | sed -n 2p
}
{
  date -u +"%Y-%m-%d %H:%M UTC"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "== CUDA unit tests (attention)"
  "$bin/kiln_tests" --gtest_filter='CudaOps.*Attention*:FusedAttention.*:CudaBreadth.Attention*' > "$out/unit_attention.log" 2>&1
  grep -E "^\[ +(OK|FAILED|PASSED) +\]|tests ran" "$out/unit_attention.log"
  grep -B2 -A8 "Failure" "$out/unit_attention.log" | head -40
  echo "== kiln.Attention alone, fp16, 12 heads of 64 (ncu, us per call)"
  for c in "16 1024 causal_bool" "16 1024 causal_add" "16 1024 none" "64 128 causal_add" "64 128 none"; do
    set -- $c
    python3 "$(dirname "$0")/attention_micro.py" "$1" "$2" fp16 "$3" /tmp/attention_micro.onnx
    for v in $variants; do
      b=$(dir_of $v)
      LD_LIBRARY_PATH=$b "$b/kiln" build /tmp/attention_micro.onnx -o /tmp/attention_micro.$v.kiln --device cuda > /dev/null 2>&1 || echo "build failed ($v)"
      echo "B=$1 S=$2 $3 $v: $(kernel_us $v /tmp/attention_micro.$v.kiln)"
    done
  done
  prepare_zoo gpt2 bert_base > /dev/null 2>&1
  echo "== zoo models, fp16 batch 64 (GPU-resident, CUDA events)"
  for m in gpt2 bert_base; do
    for v in $variants; do
      b=$(dir_of $v)
      LD_LIBRARY_PATH=$b "$b/kiln" build build/zoo/${m}_op17.onnx -o /tmp/$m.$v.kiln --device cuda --precision fp16 \
        --shapes input_ids:64x128,attention_mask:64x128 > "$out/build_$m.$v.txt" 2>&1 || echo "build failed ($m $v)"
    done
    grep -A3 "accuracy against" "$out/build_$m.N.txt" | grep "relative L2" | sed "s/^/$m N /"
    for v in $variants $variants; do
      b=$(dir_of $v)
      LD_LIBRARY_PATH=$b "$b/kiln" bench /tmp/$m.$v.kiln $(zoo_args $m 64) -n 40 --warmup 10 --device-io 2>&1 |
        grep -E "^gpu median|rror" | sed "s/^/$m $v b64 /"
    done
    for v in $variants; do echo "$m $v: $(kernel_us $v /tmp/$m.$v.kiln $(zoo_args $m 64))"; done
  done
  rm -f "$out/ncu.csv"
} 2>&1 | tee "$out/attention_mask_check.log"
