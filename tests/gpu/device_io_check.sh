#!/usr/bin/env bash
# GPU-resident inputs and outputs on a machine with an NVIDIA GPU, from a folder with the built binaries:
#   tests/gpu/device_io_check.sh BIN_DIR OUT_DIR
# CUDA unit tests (device-resident run_into among them), then bench/gpu_bench.py for ResNet-50 and
# BERT-base FP16 at batch 1 and 64: host-in/host-out and GPU-resident tables, kiln against torch
# eager and torch.compile (reduce-overhead) in one run. Writes OUT_DIR/device_io.log and the JSON.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
{
  gpu_unit_and_alloc_tests
  prepare_zoo resnet50 bert_base
  for m in resnet50 bert_base; do
    python3 bench/gpu_bench.py --kiln "$bin/kiln" --models $m --precisions fp16 --compile-modes reduce-overhead \
      --json "$out/gpu_bench_io_$m.json" > "$out/gpu_bench_io_$m.log" 2>&1
    grep -vE '^\{' "$out/gpu_bench_io_$m.log" | tail -n 16
  done
} 2>&1 | tee "$out/device_io.log"
