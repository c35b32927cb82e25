#!/usr/bin/env bash
# kiln.Attention's tactics on a machine with an NVIDIA GPU, from the repository root with the built
# binaries in BIN_DIR:  tests/gpu/attention_tactics_check.sh BIN_DIR OUT_DIR
# 1. The CUDA unit tests (every attention tactic against the CPU kernel among them) and the allocation tests.
# 2. Per transformer (FP16, opt level 2, shapes fixed at batch 1 and 64): tests/gpu/tuning_check.sh's
#    untuned vs tuned builds, build times, outputs and ABBA times; then the attention layers' candidates
#    and times from `kiln build -v` (fa2/fa4/fa8: the register-resident kernel with 2, 4, 8 warps per
#    block; wmma: the WMMA kernel).
# Writes OUT_DIR/attention_tactics.log (and tuning_check.sh's files).
set -uo pipefail
bin_dir=$1; out_dir=$2
here=$(dirname "$0")
. "$here/lib.sh"
models="${MODELS:-bert_base distilbert}"
{
  gpu_unit_and_alloc_tests
} 2>&1 | tee "$out/attention_tactics.log"
MODELS="$models" SKIP_UNIT=1 bash "$here/tuning_check.sh" "$bin_dir" "$out_dir" > /dev/null 2>&1
{
  cat "$out/tuning.log"
  echo "== attention layers as tuned (candidates with their times)"
  for m in $models; do
    for b in 1 64; do
      echo "-- $m b$b"
      grep "^kiln: tune " "$out/${m}_b${b}_tune.txt" | grep -i "attention" | head -3 | cut -c1-300
    done
  done
} 2>&1 | tee -a "$out/attention_tactics.log"
