#!/usr/bin/env bash
# tests/gpu/cpu_host_avx512.sh BIN_DIR OUT_DIR NODE_TAR — the CPU kernels' AVX-512 copies checked where
# they run: the device's host is this project's only machine with AVX-512 (CI and the development
# machine have AVX2 at most), so on it: the unit tests (CPU and CUDA), onnx's node suite on the CPU
# through `kiln conform` (NODE_TAR as in tests/gpu/cuda_conformance.sh), and the CPU fast-path Python
# tests when the host's Python has pytest; then #13's benchmark (tests/gpu/cpu_host_final.sh's, no GPU
# part) unless NO_BENCH=1. Output under OUT_DIR.
set -uo pipefail
node_tar=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")
source "$(dirname "$0")/lib.sh"
{
  date -u +"%Y-%m-%d %H:%M UTC"
  grep -o -w -E 'avx512f|avx512vl|avx512bw|avx512dq' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
  echo "== unit tests (all; the CPU kernels take their AVX-512 copies here)"
  "$bin/kiln_tests" > "$out/unit_tests.log" 2>&1
  grep -E "^\[ +(PASSED|FAILED|SKIPPED) +\]|tests ran" "$out/unit_tests.log"
  grep -B2 -A8 "Failure" "$out/unit_tests.log" | head -60
  echo "== onnx's node suite on the CPU"
  rm -rf build/node_data && mkdir -p build/node_data && tar -C build/node_data -xJf "$node_tar"
  "$bin/kiln" conform build/node_data/node --device cpu --json "$out/cpu_node_avx512.jsonl" | tail -25
} 2>&1 | tee "$out/cpu_host_avx512.log"
cpu_host_setup 2>&1 | tee -a "$out/cpu_host_avx512.log"
export PYTHONPATH=python  # cpu_host_setup's own export stays in the pipeline's subshell
{
  if python3 -c 'import pytest' 2>/dev/null; then
    echo "== tests/python/test_cpu_fast_paths.py"
    python3 -m pytest -q -p no:cacheprovider tests/python/test_cpu_fast_paths.py 2>&1 | tail -15
  else
    echo "== no pytest on this host: the Python fast-path tests did not run"
  fi
} 2>&1 | tee -a "$out/cpu_host_avx512.log"
[ -n "${NO_BENCH:-}" ] && exit 0
echo "== bench/cpu_bench.py pinned to cores 2,3" | tee -a "$out/cpu_host_avx512.log"
taskset -c 2,3 python3 bench/cpu_bench.py --threads 1,2 --batches 1 --budget ${BUDGET:-6} --max-runs 40 --profile-slow 0 \
  --out "$out/cpu_host.json" 2>&1 | tee "$out/cpu_host_bench.log"
if [ -n "${OTHER:-}" ]; then
  echo "== bench/other_models.py (export with the host's torch, then compare pinned to cores 2,3)" | tee -a "$out/cpu_host_avx512.log"
  python3 bench/other_models.py export 2>&1 | grep -v -i warn | tee -a "$out/cpu_host_other.log"
  taskset -c 2,3 python3 bench/other_models.py compare --threads 2 --runs ${OTHER_RUNS:-10} 2>&1 | tee -a "$out/cpu_host_other.log"
fi
