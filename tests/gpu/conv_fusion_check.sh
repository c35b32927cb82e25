#!/usr/bin/env bash
# cuDNN's fused convolution (bias, residual and ReLU in the convolution's epilogue) on a machine with
# an NVIDIA GPU, from a folder with the built binaries:
#   tests/gpu/conv_fusion_check.sh BIN_DIR OUT_DIR
# CUDA unit tests; then for the CNNs, FP16 and FP32 engines (opt level 2) with the fused convolution
# (default) and without it (KILN_CUDNN_FUSED=0, kiln's epilogue pass): accuracy against the FP32
# engine, batch 1 and 64 medians in ABBA order with GPU-resident inputs and outputs; then a
# per-kernel GPU time table of one batch-64 run of each (Nsight Compute, clocks left alone) when
# SKIP_NCU is unset. Knobs: CNNS, PRECISIONS ("fp16 fp32"), AB_VAR (the switch set to 1/0 for the
# two engines, default KILN_CUDNN_FUSED; e.g. KILN_CONV_PAD_CHANNELS), NCU_MODELS (default CNNS),
# NCU_AB ("1 0"). Writes OUT_DIR/conv_fusion.log.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
cnns="${CNNS:-resnet50 mobilenet_v2}"
precisions="${PRECISIONS:-fp16 fp32}"
ab="${AB_VAR:-KILN_CUDNN_FUSED}"
bench() {  # bench LABEL VAR=VALUE ENGINE ARGS...
  local label=$1 setting=$2; shift 2
  env "$setting" "$bin/kiln" bench "$@" --device-io 2>&1 | grep -E "median|rror" | sed "s/^/$label: /"
}
{
  [ -n "${SKIP_UNIT:-}" ] || gpu_unit_and_alloc_tests
  prepare_zoo $cnns
  for m in $cnns; do
    f=build/zoo/${m}_op17.onnx; a1=$(zoo_args $m 1); a64=$(zoo_args $m 64)
    "$bin/kiln" build "$f" -o "$out/${m}_ref32.kiln" --device cuda --opt-level 2 > /dev/null 2>&1
    for p in $precisions; do
      for fz in 1 0; do
        env $ab=$fz "$bin/kiln" build "$f" -o "$out/${m}_${p}_f$fz.kiln" --device cuda --opt-level 2 --precision $p \
          > "$out/${m}_${p}_f${fz}_build.txt" 2>&1 || tail -3 "$out/${m}_${p}_f${fz}_build.txt"
      done
      echo "== $m $p: $ab=1 (f1) vs $ab=0 (f0)"
      for fz in 1 0; do
        env $ab=$fz "$bin/kiln" compare "$out/${m}_ref32.kiln" "$out/${m}_${p}_f$fz.kiln" $a64 --runs 2 --rtol 5e-2 2>&1 |
          grep -E "relative L2|rror" | sed "s/^/f$fz b64 vs fp32 engine: /"
      done
      for b in 1 64; do
        a=$(zoo_args $m $b); n=$([ $b = 1 ] && echo 200 || echo 30)
        for fz in 1 0 0 1; do
          bench "f$fz b$b" "$ab=$fz" "$out/${m}_${p}_f$fz.kiln" $a -n $n --warmup 10
        done
      done
    done
  done
  if [ -z "${SKIP_NCU:-}" ] && command -v ncu > /dev/null; then
    for m in ${NCU_MODELS:-$cnns}; do
      for fz in ${NCU_AB:-1 0}; do
        echo "== per-kernel GPU time, $m fp16 b64, $ab=$fz (ncu; kiln bench -n 1 --warmup 1 makes 3 runs)"
        env $ab=$fz ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
          --launch-skip 0 "$bin/kiln" bench "$out/${m}_fp16_f$fz.kiln" $(zoo_args $m 64) -n 1 --warmup 1 --device-io \
          --no-cuda-graphs > "$out/ncu_${m}_f$fz.csv" 2> "$out/ncu_${m}_f$fz.err"
        python3 tests/gpu/kernel_table.py "$out/ncu_${m}_f$fz.csv" --runs 3 | head -25
      done
    done
  fi
  rm -f "$out"/*.kiln
} 2>&1 | tee "$out/conv_fusion.log"
