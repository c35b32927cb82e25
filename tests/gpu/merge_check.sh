#!/usr/bin/env bash
# After merging the CUDA NaN, tuning-policy and engine-check work: the CUDA tests they touch, FP16
# engines saved and loaded again (engine load re-checks every node), and tuned build times with the
# new tuning policy against the figures in issue #41. From the repository root, binaries in BIN_DIR:
#   bash tests/gpu/merge_check.sh BIN_DIR OUT_DIR
set -uo pipefail
. "$(dirname "$0")/lib.sh"
{
  date -u +"%Y-%m-%d %H:%M UTC"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "== CUDA unit tests (Cuda*, CudaNaN*, attention, tuning, engine checks)"
  "$bin/kiln_tests" --gtest_filter='Cuda*:Runtime.Cuda*:*Attention*:Tuning*:EngineChecks*:UntrustedNumbers*' \
    > "$out/cuda_unit_tests.log" 2>&1
  grep -E "^\[ +(PASSED|FAILED|SKIPPED) +\]|tests ran" "$out/cuda_unit_tests.log"
  grep -B2 -A8 "Failure" "$out/cuda_unit_tests.log" | head -60
  prepare_zoo resnet50 bert_base
  declare -A shapes=([resnet50]="input:64x3x224x224" [bert_base]="input_ids:64x128,attention_mask:64x128")
  for m in resnet50 bert_base; do
    echo "== $m fp16 batch 64: tuned build (new policy), save, load, bench"
    /usr/bin/time -f "build wall %e s" "$bin/kiln" build build/zoo/${m}_op17.onnx -o /tmp/$m.kiln --device cuda \
      --precision fp16 --shapes "${shapes[$m]}" -v > "$out/build_$m.txt" 2>&1
    grep -E "tuning:|build wall|error" "$out/build_$m.txt" | tail -3
    "$bin/kiln" bench /tmp/$m.kiln $(zoo_args $m 64) -n 30 --warmup 10 --device-io 2>&1 | grep -E "gpu median|rror"
  done
} 2>&1 | tee "$out/merge_check.log"
