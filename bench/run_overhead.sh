#!/usr/bin/env bash
# Per-run cost of the bundled example on the CPU, two kiln builds side by side (ABAB, 1 thread):
#   bench/run_overhead.sh OLD_KILN NEW_KILN [rounds]
# Prints each round's median; the example's kernels are tiny, so the difference is per-run overhead.
set -euo pipefail
old=$1 new=$2 rounds=${3:-5}
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
for r in $(seq "$rounds"); do
  for side in old new; do
    bin=$old; [ "$side" = new ] && bin=$new
    m=$("$bin" bench examples/tiny_cnn.onnx --input image=examples/tiny_cnn_input.npy -n 3000 --warmup 200 | grep -o "median [0-9.]*" | cut -d' ' -f2)
    echo "round $r $side $m"
  done
done
