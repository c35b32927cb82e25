#!/usr/bin/env bash
# tests/gpu/cpu_host_layers.sh BIN_DIR OUT_DIR — on the device's host CPU (AVX-512), pinned to cores
# 2,3: per-node profiles of kiln and onnxruntime side by side (bench/cpu_layers.py) for the models in
# $MODELS at the thread counts in $THREADS (default 1), and bench/cpu_bench.py with kiln's engines
# tuned (--kiln-tune) against the untuned ones. Output under OUT_DIR.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
[ -n "${SKIP_SETUP:-}" ] || cpu_host_setup
export PYTHONPATH=python
m=${MODELS:-resnet50,efficientnet_b0}
{
  for model in ${m//,/ }; do
    for t in ${THREADS:-1}; do
      taskset -c 2,3 python3 bench/cpu_layers.py "$model" --threads $t --runs 10 --json "$out/layers_${model}_t$t.json"
    done
  done
  echo "== kiln untuned"
  taskset -c 2,3 python3 bench/cpu_bench.py --models $m --threads 1,2 --batches 1 --budget 4 --profile-slow 0 --out "$out/untuned.json"
  echo "== kiln tuned"
  taskset -c 2,3 python3 bench/cpu_bench.py --models $m --threads 1,2 --batches 1 --budget 4 --profile-slow 0 --kiln-tune --out "$out/tuned.json"
} 2>&1 | tee "$out/cpu_host_layers.log"
