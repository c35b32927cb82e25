#!/usr/bin/env bash
# tests/gpu/cpu_host_bench.sh BIN_DIR OUT_DIR [CORES] [bench/cpu_bench.py options...]
#
# #13's own check, on the lent device's host CPU (16 cores, AVX-512): bench/cpu_bench.py (kiln vs
# onnxruntime, ABBA, one process) pinned with taskset to two cores (default "2,3") of an otherwise
# idle machine, every zoo model. The host has Python 3.12 while the development machine builds the
# module for its own Python, so this builds kiln's Python module here first: python/module.cpp
# against the carried libkiln.so, with the pybind11 headers torch ships. Writes the result JSON and
# the log under OUT_DIR.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cores=${3:-2,3}
shift $(( $# < 3 ? $# : 3 ))

cpu_host_setup
models=${MODELS:-resnet50,mobilenet_v2,efficientnet_b0,convnext_tiny,vit_b_16,deeplabv3_mobilenet_v3_large,bert_base,distilbert,gpt2}
export PYTHONPATH=python
echo "== bench/cpu_bench.py pinned to cores $cores $*"
taskset -c "$cores" python3 bench/cpu_bench.py --models "$models" --profile-slow 0 --out "$out/cpu_host.json" "$@" \
  2>&1 | tee "$out/cpu_host_bench.log"
