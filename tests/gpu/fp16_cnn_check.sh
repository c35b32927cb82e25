#!/usr/bin/env bash
# FP16 engines of the BatchNorm CNNs on a GPU machine, from the repository root with the built
# binaries in .carry/: exports ResNet-50, MobileNetV2 and EfficientNet-B0 (opset 17), compares each
# FP16 CUDA engine with the FP32 one (relative L2, bound 5e-3) and times batch 1 (and ResNet-50
# batch 64, FP16 and FP32). Usage: tests/gpu/fp16_cnn_check.sh
export LD_LIBRARY_PATH=$PWD/.carry; k=.carry/kiln
python3 bench/zoo/export.py --models resnet50,mobilenet_v2,efficientnet_b0 --opsets 17 2>&1 | grep export:
python3 -c "
import numpy as np; np.save('/tmp/x1.npy', np.random.default_rng(0).standard_normal((1,3,224,224)).astype(np.float32)); np.save('/tmp/x64.npy', np.random.default_rng(0).standard_normal((64,3,224,224)).astype(np.float32))"
for m in resnet50 mobilenet_v2 efficientnet_b0; do
  f=build/zoo/${m}_op17.onnx
  $k build $f -o /tmp/a.kiln --device cuda | grep -E "^built" | cut -c1-60
  $k build $f -o /tmp/h.kiln --device cuda --precision fp16 | grep -E "^built" | cut -c1-60
  echo "== $m fp16 vs fp32"; $k compare /tmp/a.kiln /tmp/h.kiln --input input=/tmp/x1.npy --rtol 5e-3 | grep "relative"
  $k bench /tmp/h.kiln --input input=/tmp/x1.npy -n 30 --warmup 5 | tail -1
  if [ $m = resnet50 ]; then $k bench /tmp/h.kiln --input input=/tmp/x64.npy -n 20 --warmup 3 | tail -1 | sed 's/^/b64 fp16: /'; $k bench /tmp/a.kiln --input input=/tmp/x64.npy -n 20 --warmup 3 | tail -1 | sed 's/^/b64 fp32: /'; fi
done
