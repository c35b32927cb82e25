#!/usr/bin/env bash
# onnx's node suite on CUDA, on a machine with an NVIDIA GPU, through `kiln conform` (the device's
# onnx wheel has no test data and its Python cannot load a module built elsewhere):
#   tests/gpu/cuda_conformance.sh BIN_DIR OUT_DIR NODE_TAR
# NODE_TAR: onnx's backend/test/data/node folder as a .tar.xz (2 MB), made on the development machine:
#   tar -C .venv/lib/python3.11/site-packages/onnx/backend/test/data -cJf .carry/node.tar.xz node
# Writes OUT_DIR/cuda_node.jsonl (one line per test: outcome, message, steps on cuda/cpu) and
# OUT_DIR/cuda_node.log (failures, errors and the summary; the same run on the CPU for reference).
set -uo pipefail
node_tar=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")
. "$(dirname "$0")/lib.sh"
rm -rf build/node_data && mkdir -p build/node_data && tar -C build/node_data -xJf "$node_tar"
{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "== CUDA"
  "$bin/kiln" conform build/node_data/node --device cuda --json "$out/cuda_node.jsonl"
  echo "== CPU (same binary, same data)"
  "$bin/kiln" conform build/node_data/node --device cpu --json "$out/cpu_node.jsonl" | tail -1
} 2>&1 | tee "$out/cuda_node.log"
