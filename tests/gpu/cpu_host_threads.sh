#!/usr/bin/env bash
# tests/gpu/cpu_host_threads.sh BIN_DIR OUT_DIR — after tests/gpu/cpu_host_bench.sh on the same warm
# machine (module built, zoo exported): why kiln's 2-thread runs are slow on the host's pinned cores.
# Each runtime alone (bench/cpu_alone.py), then cpu_bench.py with ORT's spinning off, then kiln with
# its OpenMP workers spinning. Output: $OUT_DIR/cpu_host_threads.log.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
[ -n "${SKIP_SETUP:-}" ] || cpu_host_setup
export PYTHONPATH=python
m=${MODELS:-mobilenet_v2,resnet50,efficientnet_b0,bert_base}
{
  date -u +"%Y-%m-%d %H:%M UTC"
  for t in 1 2; do
    taskset -c 2,3 python3 bench/cpu_alone.py kiln --models $m --threads $t --label alone
    taskset -c 2,3 python3 bench/cpu_alone.py ort --models $m --threads $t --label alone
    taskset -c 2,3 python3 bench/cpu_alone.py ort --no-spin --models $m --threads $t --label alone
  done
  OMP_WAIT_POLICY=ACTIVE taskset -c 2,3 python3 bench/cpu_alone.py kiln --models $m --threads 2 --label alone-active
  GOMP_SPINCOUNT=0 OMP_WAIT_POLICY=PASSIVE taskset -c 2,3 python3 bench/cpu_alone.py kiln --models $m --threads 2 --label alone-passive0
  echo "== ABBA, ORT spinning off"
  taskset -c 2,3 python3 bench/cpu_bench.py --models $m --threads 2 --batches 1 --ort-no-spin --budget 4 --profile-slow 0 --out "$out/abba_nospin.json"
  echo "== ABBA, ORT spinning, kiln OMP_WAIT_POLICY=ACTIVE"
  OMP_WAIT_POLICY=ACTIVE taskset -c 2,3 python3 bench/cpu_bench.py --models $m --threads 2 --batches 1 --budget 4 --profile-slow 0 --out "$out/abba_active.json"
} 2>&1 | tee "$out/cpu_host_threads.log"
