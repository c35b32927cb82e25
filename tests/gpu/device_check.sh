#!/usr/bin/env bash
# GPU check, run on a machine with an NVIDIA GPU from a folder holding the built binaries:
#   tests/gpu/device_check.sh BIN_DIR OUT_DIR
# BIN_DIR has kiln, kiln_tests, libkiln.so (+ any shared libraries the machine lacks).
# Runs the Cuda* unit tests, builds the bundled example for CPU and CUDA, checks both give the same
# outputs (FP32 tolerance), and times both. Everything it prints is also written to OUT_DIR.
set -uo pipefail
bin=$(cd "$1" && pwd); out=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "== Cuda* unit tests"
  "$bin/kiln_tests" --gtest_filter='Cuda*' 2>&1 | grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) +\]|tests ran|fingerprint"
  ex="$root/examples"
  for dev in cpu cuda; do
    echo "== example on $dev"
    "$bin/kiln" build "$ex/tiny_cnn.onnx" -o "$out/tiny_cnn_$dev.kiln" --device $dev || exit 1
    "$bin/kiln" run "$out/tiny_cnn_$dev.kiln" --input image="$ex/tiny_cnn_input.npy" --output-dir "$out/out_$dev" || exit 1
    "$bin/kiln" bench "$out/tiny_cnn_$dev.kiln" --input image="$ex/tiny_cnn_input.npy" -n 200 --warmup 20
  done
  echo "== compare cpu vs cuda"
  python3 - "$out" <<'PY'
import sys, numpy as np
o = sys.argv[1]
a = np.load(f"{o}/out_cpu/probabilities.npy"); b = np.load(f"{o}/out_cuda/probabilities.npy")
err = float(np.abs(a - b).max()); rel = float(np.linalg.norm(a - b) / np.linalg.norm(a))
print(f"max abs diff {err:.3e}, relative L2 {rel:.3e}:", "OK" if rel < 1e-5 else "MISMATCH")
PY
  echo "== engine built for cuda refuses a mismatched fingerprint? (load on this machine must work)"
  "$bin/kiln" run "$out/tiny_cnn_cuda.kiln" --input image="$ex/tiny_cnn_input.npy" | tail -1
} 2>&1 | tee "$out/device_check.log"
