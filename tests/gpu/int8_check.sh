#!/usr/bin/env bash
# INT8 on the GPU (kiln.QMatMul: cuBLASLt int8 tensor cores), on a machine with an NVIDIA GPU, from the
# repository root with the built binaries in .carry/ (OUT: the results folder):
#   OUT=... bash tests/gpu/int8_check.sh
# 1. kiln.QMatMul's CUDA unit tests (against the QDQ graph's meaning, computed in double);
# 2. BERT-base (the zoo's export, opset 17) quantized by onnxruntime's quantize_static (QDQ, MatMul
#    only, per-channel int8 weights, uint8 activations): kiln's CUDA engine against onnxruntime (CPU)
#    on the same QDQ model;
# 3. `kiln build --int8` of BERT-base for CUDA from a calibration folder, against the float32 CPU engine;
# 4. GPU-resident latency (`kiln bench --device-io`) at batch 1 and 64 of the fp32, fp16, int8 and QDQ
#    engines.
set -uo pipefail
. tests/gpu/lib.sh .carry $OUT/r
m=bert_base
{
  date -u +"%Y-%m-%d %H:%M UTC"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "== kiln.QMatMul CUDA unit tests"
  "$bin/kiln_tests" --gtest_filter='CudaQMatMul*' 2>&1 | grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) +\]|Failure|Which is|Expected|element" | head -40
  prepare_zoo $m
  python3 - <<'PY'
import os, sys
import numpy as np
sys.path.insert(0, "bench/zoo")
import zoo
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
sets = [zoo.make_inputs(zoo.MODELS["bert_base"], 1, seed=100 + i) for i in range(4)]
for i, s in enumerate(sets):  # kiln's calibration folder: one subfolder per set
    os.makedirs(f"build/calib/bert_base/set{i}", exist_ok=True)
    for k, v in s.items():
        np.save(f"build/calib/bert_base/set{i}/{k}.npy", v)
class Reader(CalibrationDataReader):
    def __init__(self):
        self.it = iter(sets)
    def get_next(self):
        return next(self.it, None)
quantize_static("build/zoo/bert_base_op17.onnx", "build/zoo/bert_base_qdq.onnx", Reader(), quant_format=QuantFormat.QDQ,
                per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"])
print("quantize_static: wrote build/zoo/bert_base_qdq.onnx")
PY
  echo "== ORT-quantized (QDQ) BERT-base: kiln CUDA vs onnxruntime CPU, batch 1"
  "$bin/kiln" build build/zoo/bert_base_qdq.onnx -o /tmp/qdq.kiln --device cuda -v > "$out/build_qdq.txt" 2>&1 || tail -5 "$out/build_qdq.txt"
  grep -cE "fuse-qdq.*QMatMul|as kiln.QMatMul" "$out/build_qdq.txt" | sed 's/^/fuse-qdq products: /'
  "$bin/kiln" inspect /tmp/qdq.kiln -v 2>/dev/null | grep -cE "cuda.QMatMul" | sed 's/^/steps on cuda.QMatMul: /'
  "$bin/kiln" compare build/zoo/bert_base_qdq.onnx --device-a cuda --against onnxruntime $(zoo_args $m 1) --rtol 2e-2 --atol 2e-2 2>&1 |
    grep -E "relative L2|max abs|PASSED|FAILED|rror" | head -6
  echo "== kiln build --int8 (CUDA) from a calibration folder vs float32 CPU, batch 1"
  "$bin/kiln" build build/zoo/${m}_op17.onnx -o /tmp/int8.kiln --device cuda --int8 --calibration build/calib/bert_base > "$out/build_int8.txt" 2>&1 ||
    tail -5 "$out/build_int8.txt"
  grep -E "int8|accuracy" "$out/build_int8.txt" | head -5
  "$bin/kiln" compare build/zoo/${m}_op17.onnx /tmp/int8.kiln --device-a cpu $(zoo_args $m 1) --rtol 5e-2 2>&1 | grep -E "relative L2|rror|FAIL|pass"
  "$bin/kiln" build build/zoo/${m}_op17.onnx -o /tmp/fp32.kiln --device cuda > /dev/null 2>&1
  "$bin/kiln" build build/zoo/${m}_op17.onnx -o /tmp/fp16.kiln --device cuda --precision fp16 > /dev/null 2>&1
  for b in 1 64; do
    for e in fp32 fp16 int8 qdq; do
      printf "%s batch %s %s: " $m $b $e
      "$bin/kiln" bench /tmp/$e.kiln $(zoo_args $m $b) --device-io -n 30 --warmup 5 2>&1 | grep -E "^median|rror" | head -1
    done
  done
} 2>&1 | tee "$out/int8_check.log"
