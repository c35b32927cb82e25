#!/usr/bin/env bash
# The register-resident attention kernel on a machine with an NVIDIA GPU, from the repository root with
# the built binaries in BIN_DIR:  tests/gpu/attention_fa_check.sh BIN_DIR OUT_DIR
# 1. The CUDA attention unit test (both tensor-core kernels against the CPU kernel) and the allocation tests.
# 2. BERT-base, DistilBERT, GPT-2 and ViT-B/16 FP16 engines against the CPU FP32 engine (third run: a
#    graph replay), batch 1 and 64.
# 3. BERT-base FP16, GPU-resident, the new kernel against the WMMA one (KILN_ATTENTION_WMMA=1), same run.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
models="${MODELS:-bert_base distilbert gpt2 vit_b_16}"
{
  date -u +"%Y-%m-%d %H:%M UTC"
  "$bin/kiln_tests" --gtest_filter='CudaOps.Attention*:CudaOps.SoftmaxAndNormalizations' 2>&1 | grep -E "^\[ +(OK|FAILED|PASSED) +\]|Failure|rel|Which|Expected" | head -30
  "$bin/kiln_alloc_tests" 2>&1 | grep -E "^\[ +(OK|FAILED|PASSED) +\]"
  prepare_zoo $models
  for m in $models; do
    f=build/zoo/${m}_op17.onnx
    [ -f "$f" ] || { echo "== $m: not exported"; continue; }
    "$bin/kiln" build "$f" -o "$out/$m.kiln" --device cuda --opt-level 2 --precision fp16 --no-accuracy-check > "$out/${m}_build.txt" 2>&1
    echo "== $m fp16: $(grep -c 'kiln.Attention' "$out/${m}_build.txt") attention lines in the build report"
    for b in 1 64; do
      "$bin/kiln" compare "$f" "$out/$m.kiln" --device-a cpu $(zoo_args $m $b) --runs 3 --rtol 5e-3 2>&1 | grep -E "relative L2|rror" | sed "s/^/b$b vs CPU fp32: /"
    done
    for b in 1 64; do
      for k in fa wmma; do
        env $([ $k = wmma ] && echo KILN_ATTENTION_WMMA=1) "$bin/kiln" bench "$out/$m.kiln" $(zoo_args $m $b) -n 50 --warmup 10 --device-io 2>&1 |
          grep -E "^median|gpu median|rror" | tr '\n' ' ' | sed "s/^/b$b $k: /"; echo
      done
    done
    rm -f "$out/$m.kiln"
  done
} 2>&1 | tee "$out/attention_fa_check.log"
