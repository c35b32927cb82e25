#!/usr/bin/env bash
# Engine-core check on a machine with an NVIDIA GPU, from a folder holding the built binaries:
#   tests/gpu/engine_core_check.sh BIN_DIR OUT_DIR
# BIN_DIR has kiln, kiln_tests, kiln_alloc_tests, libkiln.so (+ shared libraries the machine lacks).
# Runs the CUDA unit and allocation tests, exports ResNet-50 and BERT-base (random weights, the zoo's
# exporter) with the machine's PyTorch, then times kiln's CUDA engines at batch 1 and 64 next to
# PyTorch eager FP32 on the same GPU, and checks CUDA against CPU outputs. Writes OUT_DIR/engine_core.log.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "== CUDA unit tests"
  "$bin/kiln_tests" --gtest_filter='Cuda*' 2>&1 | grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) +\]|tests ran|fingerprint"
  echo "== allocation tests (CPU and CUDA)"
  "$bin/kiln_alloc_tests" 2>&1 | grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) +\]|info|Failure|Which is"
  echo "== bundled example, CUDA"
  "$bin/kiln" build examples/tiny_cnn.onnx -o "$out/tiny_cnn_cuda.kiln" --device cuda | tail -2
  "$bin/kiln" bench "$out/tiny_cnn_cuda.kiln" --input image=examples/tiny_cnn_input.npy -n 500 --warmup 50 | tail -3
  echo "== export ResNet-50 and BERT-base (opset 17)"
  python3 bench/zoo/export.py --models resnet50,bert_base --opsets 17 2>&1 | tail -3
  python3 - <<'PY'
import numpy as np, os
os.makedirs("build/inputs", exist_ok=True)
rng = np.random.default_rng(0)
for b in (1, 64):
    np.save(f"build/inputs/image_b{b}.npy", rng.standard_normal((b, 3, 224, 224)).astype(np.float32))
    np.save(f"build/inputs/ids_b{b}.npy", rng.integers(0, 30522, (b, 128)).astype(np.int64))
    np.save(f"build/inputs/mask_b{b}.npy", np.ones((b, 128), np.int64))
PY
  python3 -c "import onnx; m=onnx.load('build/zoo/bert_base_op17.onnx', load_external_data=False); print('bert inputs:', [i.name for i in m.graph.input])"
  for b in 1 64; do
    echo "== ResNet-50 batch $b, CUDA FP32"
    "$bin/kiln" bench build/zoo/resnet50_op17.onnx --device cuda --input input=build/inputs/image_b$b.npy -n 30 --warmup 5 2>&1 | tail -3
    echo "== BERT-base seq 128 batch $b, CUDA FP32"
    "$bin/kiln" bench build/zoo/bert_base_op17.onnx --device cuda --input input_ids=build/inputs/ids_b$b.npy \
      --input attention_mask=build/inputs/mask_b$b.npy -n 10 --warmup 2 2>&1 | tail -3
  done
  echo "== ResNet-50 engine: build, save, load time"
  "$bin/kiln" build build/zoo/resnet50_op17.onnx -o "$out/resnet50_cuda.kiln" --device cuda | grep -E "arena|CPU|built"
  "$bin/kiln" bench "$out/resnet50_cuda.kiln" --input input=build/inputs/image_b1.npy -n 30 --warmup 5 | head -1
  echo "== ResNet-50 CPU engine: load time (read, verify, instantiate; no lowering), 3 loads"
  "$bin/kiln" build build/zoo/resnet50_op17.onnx -o "$out/resnet50_cpu.kiln" --device cpu | grep -E "built"
  for i in 1 2 3; do "$bin/kiln" bench "$out/resnet50_cpu.kiln" --input input=build/inputs/image_b1.npy -n 1 --warmup 0 | head -1; done
  echo "== CUDA vs CPU outputs"
  "$bin/kiln" compare build/zoo/resnet50_op17.onnx --device-a cpu --device-b cuda --input input=build/inputs/image_b1.npy 2>&1 | tail -3
  echo "== PyTorch eager FP32, same GPU (CUDA events, median)"
  python3 tests/gpu/torch_eager.py
} 2>&1 | tee "$out/engine_core.log"
