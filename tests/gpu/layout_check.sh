#!/usr/bin/env bash
# Channels-last convolutions, residual fusion and the attention fusion on a machine
# with an NVIDIA GPU, from a folder with the built binaries:
#   tests/gpu/layout_check.sh BIN_DIR OUT_DIR
# CUDA unit tests; then for the CNNs (FP16, opt level 2): channels-last (default) against
# channels-first (--disable-pass channels-last): accuracy against the FP32 CUDA engine, batch 1 and 64
# times, per-op profile at batch 64.
# For the transformers (FP32 and FP16): which fused ops run, accuracy, times, profile. Writes
# OUT_DIR/layout.log.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
cnns="${CNNS:-resnet50 mobilenet_v2}"
tfs="${TRANSFORMERS:-bert_base}"
profile() {  # profile ENGINE ARGS...
  CUDA_LAUNCH_BLOCKING=1 KILN_PROFILE=1 "$bin/kiln" bench "$@" -n 5 --warmup 2 --no-cuda-graphs 2>&1 |
    grep -vE "^(median|min|engine|arena|cuda graphs|runs)" | head -16
}
{
  gpu_unit_and_alloc_tests
  all="$cnns $tfs"
  prepare_zoo $all
  for m in $cnns; do
    f=build/zoo/${m}_op17.onnx; a1=$(zoo_args $m 1); a64=$(zoo_args $m 64)
    "$bin/kiln" build "$f" -o "$out/${m}32.kiln" --device cuda --opt-level 2 > /dev/null 2>&1
    for cl in 1 0; do
      nocl=(); [ $cl = 0 ] && nocl=(--disable-pass channels-last)
      "$bin/kiln" build "$f" -o "$out/${m}16.kiln" --device cuda --opt-level 2 --precision fp16 "${nocl[@]}" \
        > "$out/${m}_cl${cl}_placement.txt" 2>&1
      echo "== $m fp16 channels_last=$cl: $(grep -E '^steps:' "$out/${m}_cl${cl}_placement.txt")"
      grep -oE "Transpose|kiln\.[A-Za-z]+" "$out/${m}_cl${cl}_placement.txt" | sort | uniq -c | tr '\n' ' '; echo
      "$bin/kiln" compare "$out/${m}32.kiln" "$out/${m}16.kiln" $a1 --runs 3 --rtol 5e-2 2>&1 | grep -E "relative L2|rror"
      "$bin/kiln" bench "$out/${m}16.kiln" $a1 -n 50 --warmup 5 2>&1 | grep -E "median|rror" | sed 's/^/b1: /'
      "$bin/kiln" bench "$out/${m}16.kiln" $a64 -n 10 --warmup 3 2>&1 | grep -E "median|rror" | sed 's/^/b64: /'
      [ "$m" = resnet50 ] && profile "$out/${m}16.kiln" $a64
    done
  done
  for m in $tfs; do
    f=build/zoo/${m}_op17.onnx; a1=$(zoo_args $m 1); a64=$(zoo_args $m 64)
    for p in fp32 fp16; do
      "$bin/kiln" build "$f" -o "$out/$m$p.kiln" --device cuda --opt-level 2 --precision $p > "$out/${m}_${p}_placement.txt" 2>&1
      echo "== $m $p: $(grep -E '^steps:' "$out/${m}_${p}_placement.txt")"
      grep -oE "kiln\.[A-Za-z]+" "$out/${m}_${p}_placement.txt" | sort | uniq -c | tr '\n' ' '; echo
      "$bin/kiln" compare "$f" "$out/$m$p.kiln" --device-a cpu $a1 --runs 3 --rtol 5e-2 2>&1 | grep -E "relative L2|rror"
      "$bin/kiln" compare "$f" "$out/$m$p.kiln" --device-a cpu $a64 --runs 3 --rtol 5e-2 2>&1 | grep -E "relative L2|rror" | sed 's/^/b64 /'
      "$bin/kiln" bench "$out/$m$p.kiln" $a1 -n 50 --warmup 5 2>&1 | grep -E "median|rror" | sed 's/^/b1: /'
      "$bin/kiln" bench "$out/$m$p.kiln" $a64 -n 10 --warmup 3 2>&1 | grep -E "median|rror" | sed 's/^/b64: /'
      profile "$out/$m$p.kiln" $a64
    done
  done
  rm -f "$out"/*.kiln
} 2>&1 | tee "$out/layout.log"
