#!/usr/bin/env bash
# INT8 CNNs on the GPU (kiln.QConv: int8 convolutions through cuDNN's graph API, residuals fused), on a
# machine with an NVIDIA GPU, from the repository root with the built binaries in .carry/ (OUT: the
# results folder):   OUT=... [BATCHES="64 256"] [UNIT=1] [QDQ=1] [TORCH=1] bash tests/gpu/int8_cnn_check.sh [model]
# (model: resnet50 by default). For each batch in $BATCHES (default 256):
# 1. (UNIT=1) kiln.QConv's and kiln.QMatMul's CUDA unit tests (against the QDQ graph's meaning, in double;
#    UNIT_FILTER: another gtest filter);
# 2. `kiln build --int8 --precision fp16 --shapes <that batch>` from a calibration folder (8 sets of 4
#    images, seeds 1-8): what was quantized and fused, where each step runs; the fp16 engine alike;
# 3. both engines against the float32 CPU engine: relative L2 of the logits and top-1 agreement over
#    the batch's images (the zoo's seeded input);
# 4. GPU-resident latency (`kiln bench --device-io`, median of 30 after 5) of both, and the INT8
#    engine's time per op type (no graphs, launch blocking);
# 5. (QDQ=1) onnxruntime's quantize_static of the model (QDQ, symmetric int8 activations, per-channel
#    weights) built for CUDA (the rest float16, untuned): what fused, kiln against onnxruntime (CPU) at
#    batch 1, its latency at the first batch (run before the batches above);
# 6. (TORCH=1) PyTorch float16, channels-last, eager and torch.compile (default mode), CUDA events;
# 7. (BASELINE=1) both engines again with --disable-pass fuse-conv-max-pool (the stem as separate steps), timed;
# 8. (PROFILE=1) the INT8 engine's per-kernel GPU time (Nsight Compute, tests/gpu/kernel_table.py).
# TUNE_S: the tuner's time limit per layer (--tune-layer-seconds; kiln's default 2); NO_FP16=1: the
# float16 engine is not built (a quicker INT8-only iteration); FP8=1 also builds `--precision fp8`
# (E4M3 convolutions and products, calibrated on the same sets) and measures it as the others;
# NO_INT8=1 skips the INT8 engine. The profiles (steps 4 and 8) are of the first engine built.
# The builds share a timing cache, $OUT/r/timing_cache.txt (returned with the results; start from a
# saved one with CACHE=path: a build whose layers it holds skips their tuning and cuDNN's compiles).
set -uo pipefail
. tests/gpu/lib.sh .carry $OUT/r
m=${1:-resnet50}
batches=${BATCHES:-256}
{
  date -u +"%Y-%m-%d %H:%M UTC"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  if [ -n "${UNIT:-}" ]; then
    echo "== kiln.QConv / kiln.QMatMul CUDA unit tests"
    "$bin/kiln_tests" --gtest_filter="${UNIT_FILTER:-CudaQ*}" 2>&1 | grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) +\]|Failure|Which is|Expected|element|got" | head -40
  fi
  python3 bench/zoo/export.py --models $m --opsets 17 2>&1 | grep -E "export:|rror"
  M=$m B="$batches" python3 - <<'PY'
import os, sys
import numpy as np
sys.path.insert(0, "bench/zoo")
import zoo
m = os.environ["M"]
for s in range(1, 9):
    os.makedirs(f"build/calib/{m}/set{s:02d}", exist_ok=True)
    for k, v in zoo.make_inputs(zoo.MODELS[m], 4, seed=s).items():
        np.save(f"build/calib/{m}/set{s:02d}/{k}.npy", v)
os.makedirs("build/inputs", exist_ok=True)
for b in ["1"] + os.environ["B"].split():
    for k, v in zoo.make_inputs(zoo.MODELS[m], int(b), seed=0).items():
        np.save(f"build/inputs/{m}_{k}_b{b}.npy", v)
PY
  if [ -n "${QDQ:-}" ]; then
    echo "== onnxruntime quantize_static (QDQ, symmetric int8 activations, per-channel int8 weights) on CUDA vs onnxruntime (CPU)"
    M=$m timeout 240 python3 - <<'PY'
import os, sys
import numpy as np
sys.path.insert(0, "bench/zoo")
import zoo
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
m = os.environ["M"]
sets = [zoo.make_inputs(zoo.MODELS[m], 4, seed=s) for s in range(1, 9)]
class Reader(CalibrationDataReader):
    def __init__(self):
        self.it = iter(sets)
    def get_next(self):
        return next(self.it, None)
quantize_static(f"build/zoo/{m}_op17.onnx", f"build/zoo/{m}_qdq.onnx", Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
print(f"quantize_static: wrote build/zoo/{m}_qdq.onnx")
PY
    "$bin/kiln" build build/zoo/${m}_qdq.onnx -o /tmp/qdq.kiln --device cuda --precision fp16 --no-tune -v > "$out/build_qdq.txt" 2>&1 ||
      tail -5 "$out/build_qdq.txt"
    grep -cE "into kiln.QConv" "$out/build_qdq.txt" | sed 's/^/fuse-qdq convolutions: /'
    "$bin/kiln" inspect /tmp/qdq.kiln -v 2>/dev/null | grep -oE "(cuda|cpu)\.[A-Za-z0-9_.]+" | sort | uniq -c | sort -rn | head -12
    "$bin/kiln" run /tmp/qdq.kiln $(zoo_args $m 1) --output-dir /tmp/out_qdq > /dev/null 2>&1
    M=$m python3 - <<'PY'
import glob, os
import numpy as np
import onnxruntime as ort
m = os.environ["M"]
s = ort.InferenceSession(f"build/zoo/{m}_qdq.onnx", providers=["CPUExecutionProvider"])
feed = {i.name: np.load(f"build/inputs/{m}_{i.name}_b1.npy") for i in s.get_inputs()}
for o, want in zip(s.get_outputs(), s.run(None, feed)):
    got = np.load(f"/tmp/out_qdq/{o.name}.npy").astype(np.float64)
    want = want.astype(np.float64)
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    print(f"QDQ model, kiln (cuda) vs onnxruntime {ort.__version__} (cpu), batch 1, {o.name}: relative L2 {rel:.4f}, "
          f"max abs {np.abs(got - want).max():.4f}, top-1 same: {bool(got.argmax() == want.argmax())}")
PY
    b=$(echo $batches | awk '{print $1}')
    printf "%s QDQ model batch %s (untuned): " $m $b
    "$bin/kiln" bench /tmp/qdq.kiln $(zoo_args $m $b) --device-io -n 30 --warmup 5 2>&1 | grep -E "^median|rror" | head -1
  fi
  in=$(python3 -c "import sys; sys.path.insert(0, 'bench/zoo'); import zoo; print(zoo.MODELS['$m'].inputs[0].name)")
  if [ -n "${CACHE:-}" ]; then cp "$CACHE" "$out/timing_cache.txt"; fi
  for b in $batches; do
    engines=""; [ -z "${NO_INT8:-}" ] && engines="int8"; [ -n "${FP8:-}" ] && engines="$engines fp8"
    for e in $engines; do
      flags="--int8 --precision fp16"; [ $e = fp8 ] && flags="--precision fp8"
      echo "== batch $b: kiln build $flags --shapes $in:${b}x3x224x224 (calibration: 8 sets of 4)"
      s0=$(date +%s)
      "$bin/kiln" build build/zoo/${m}_op17.onnx -o /tmp/${e}_b$b.kiln --device cuda $flags \
          --calibration build/calib/$m --shapes $in:${b}x3x224x224 --timing-cache "$out/timing_cache.txt" ${TUNE_S:+--tune-layer-seconds $TUNE_S} -v \
          > "$out/build_${e}_b$b.txt" 2>&1 || tail -20 "$out/build_${e}_b$b.txt"
      echo "build: $(( $(date +%s) - s0 )) s"
      grep -E "^(int8|fp8)|relative L2" "$out/build_${e}_b$b.txt" | head -3
      grep -cE "into kiln.QConv" "$out/build_${e}_b$b.txt" | sed 's/^/fuse-qdq convolutions: /'
      "$bin/kiln" inspect /tmp/${e}_b$b.kiln -v > "$out/inspect_${e}_b$b.txt" 2>&1
      grep -oE "(cuda|cpu)\.[A-Za-z0-9_.]+" "$out/inspect_${e}_b$b.txt" | sort | uniq -c | sort -rn | head -20
    done
    first=$(echo $engines | awk '{print $1}')
    [ -z "${NO_FP16:-}" ] && engines="$engines fp16"
    [ -z "${NO_FP16:-}" ] && { "$bin/kiln" build build/zoo/${m}_op17.onnx -o /tmp/fp16_b$b.kiln --device cuda --precision fp16 \
        --shapes $in:${b}x3x224x224 --timing-cache "$out/timing_cache.txt" ${TUNE_S:+--tune-layer-seconds $TUNE_S} \
        > "$out/build_fp16_b$b.txt" 2>&1 || tail -5 "$out/build_fp16_b$b.txt"; }
    echo "-- against float32 (cpu), the batch's $b images"
    "$bin/kiln" run build/zoo/${m}_op17.onnx --device cpu $(zoo_args $m $b) --output-dir /tmp/out_fp32 > /dev/null 2>&1
    for e in $engines; do "$bin/kiln" run /tmp/${e}_b$b.kiln $(zoo_args $m $b) --output-dir /tmp/out_$e > /dev/null 2>&1; done
    E="$engines" python3 - <<'PY'
import glob, os
import numpy as np
for e in os.environ["E"].split():
    for f in sorted(glob.glob("/tmp/out_fp32/*.npy")):
        a = np.load(f).astype(np.float64); b = np.load(os.path.join(f"/tmp/out_{e}", os.path.basename(f))).astype(np.float64)
        rel = np.linalg.norm(b - a) / np.linalg.norm(a)
        top1 = (a.reshape(a.shape[0], -1).argmax(1) == b.reshape(b.shape[0], -1).argmax(1)).mean()
        print(f"{e} vs fp32 {os.path.basename(f)}: relative L2 {rel:.4f}, top-1 agreement {top1:.3f} ({a.shape[0]} images)")
PY
    for e in $engines; do
      printf "%s batch %s %s: " $m $b $e
      "$bin/kiln" bench /tmp/${e}_b$b.kiln $(zoo_args $m $b) --device-io -n 30 --warmup 5 2>&1 | grep -E "^median|rror" | head -1
    done
    if [ -n "${BASELINE:-}" ]; then
      for e in $engines; do
        flags="--precision fp16"; [ $e = int8 ] && flags="--int8 --precision fp16 --calibration build/calib/$m"
        [ $e = fp8 ] && flags="--precision fp8 --calibration build/calib/$m"
        "$bin/kiln" build build/zoo/${m}_op17.onnx -o /tmp/${e}_b${b}_sep.kiln --device cuda $flags --disable-pass fuse-conv-max-pool \
            --shapes $in:${b}x3x224x224 --timing-cache "$out/timing_cache.txt" > "$out/build_${e}_b${b}_sep.txt" 2>&1 || tail -5 "$out/build_${e}_b${b}_sep.txt"
        printf "%s batch %s %s, stem as separate steps (--disable-pass fuse-conv-max-pool): " $m $b $e
        "$bin/kiln" bench /tmp/${e}_b${b}_sep.kiln $(zoo_args $m $b) --device-io -n 30 --warmup 5 2>&1 | grep -E "^median|rror" | head -1
      done
    fi
    if [ -n "${PROFILE:-}" ]; then
      echo "-- $first batch $b per kernel (ncu; kiln bench -n 1 --warmup 1 makes 3 runs)"
      ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base "$bin/kiln" bench /tmp/${first}_b$b.kiln \
        $(zoo_args $m $b) -n 1 --warmup 1 --device-io --no-cuda-graphs > "$out/ncu_${first}_b$b.csv" 2> "$out/ncu_${first}_b$b.err"
      python3 tests/gpu/kernel_table.py "$out/ncu_${first}_b$b.csv" --runs 3 --width 90 | head -40
      rm -f "$out/ncu_${first}_b$b.csv"
    fi
    echo "-- $first batch $b per op type (no graphs, launch blocking)"
    CUDA_LAUNCH_BLOCKING=1 KILN_PROFILE=1 "$bin/kiln" bench /tmp/${first}_b$b.kiln $(zoo_args $m $b) -n 5 --warmup 2 \
        --no-cuda-graphs 2>&1 | grep -vE "^(median|min|gpu)" | head -30
  done
  if [ -n "${TORCH:-}" ]; then
    echo "== PyTorch $m float16 channels-last, GPU-resident, CUDA events, median of 30 after 10"
    M=$m B="$batches" timeout 300 python3 - <<'PY'
import os, torch, torchvision
torch.backends.cudnn.benchmark = True
m = getattr(torchvision.models, os.environ["M"])().eval().cuda().half().to(memory_format=torch.channels_last)
def timed(f, x, n=30, w=10):
    for _ in range(w): f(x)
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for s, e in ev:
        s.record(); f(x); e.record()
    torch.cuda.synchronize()
    t = sorted(s.elapsed_time(e) for s, e in ev)
    return t[len(t) // 2]
with torch.inference_mode():
    for b in [int(v) for v in os.environ["B"].split()]:
        x = torch.randn(b, 3, 224, 224, device="cuda").half().to(memory_format=torch.channels_last)
        e = timed(m, x)
        k = timed(torch.compile(m), x)
        print(f"torch {torch.__version__} batch {b}: eager {e:.3f} ms ({b / e * 1000:.0f} img/s), "
              f"torch.compile {k:.3f} ms ({b / k * 1000:.0f} img/s)", flush=True)
PY
  fi
} 2>&1 | tee "$out/int8_cnn_check.log"
