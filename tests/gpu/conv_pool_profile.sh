#!/usr/bin/env bash
# kiln.ConvPool under Nsight Compute (full section set, one launch): ResNet's stem alone (Conv 3→64
# 7x7/2 pad 3, ReLU, MaxPool 3x3/2 pad 1) at batch $BATCH (256), float16 engine, from the repository
# root with the built binaries in .carry/:   OUT=... [BATCH=256] bash tests/gpu/conv_pool_profile.sh
set -uo pipefail
. tests/gpu/lib.sh .carry $OUT/r
b=${BATCH:-256}
{
  B=$b python3 - <<'PY'
import os
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
b = int(os.environ["B"])
rng = np.random.default_rng(0)
w = numpy_helper.from_array((rng.standard_normal((64, 3, 7, 7)) * 0.1).astype(np.float32), "w")
bias = numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "b")
# The pool's output quantized to int8 and read by an int8 1x1 convolution (a QDQ pair each): the
# engine's stem then ends in int8, as a calibrated ResNet's does.
w2 = numpy_helper.from_array(rng.integers(-100, 100, (64, 64, 1, 1)).astype(np.int8), "w2")
sc = lambda name, v: numpy_helper.from_array(np.array(v, np.float32), name)
zp = numpy_helper.from_array(np.array(0, np.int8), "zp")
nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[7, 7], strides=[2, 2], pads=[3, 3, 3, 3]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
         helper.make_node("QuantizeLinear", ["p", "ps", "zp"], ["pq"]),
         helper.make_node("DequantizeLinear", ["pq", "ps", "zp"], ["pd"]),
         helper.make_node("DequantizeLinear", ["w2", "ws", "zp"], ["w2d"]),
         helper.make_node("Conv", ["pd", "w2d"], ["y"], kernel_shape=[1, 1])]
g = helper.make_graph(nodes, "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, 3, 224, 224])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                      initializer=[w, bias, w2, zp, sc("ps", 0.05), sc("ws", 0.01)])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), "/tmp/stem.onnx")
np.save("/tmp/stem_x.npy", rng.standard_normal((b, 3, 224, 224)).astype(np.float32))
PY
  "$bin/kiln" build /tmp/stem.onnx -o /tmp/stem.kiln --device cuda --precision fp16 --no-tune 2>&1 | tail -2
  "$bin/kiln" inspect /tmp/stem.kiln -v 2>&1 | grep -E "^\[cuda\]"
  "$bin/kiln" bench /tmp/stem.kiln --input x=/tmp/stem_x.npy --device-io -n 20 --warmup 5 2>&1 | grep -E "^median|rror"
  ncu --clock-control none -k regex:conv_pool -c 1 --set full "$bin/kiln" bench /tmp/stem.kiln --input x=/tmp/stem_x.npy \
      -n 1 --warmup 0 --device-io --no-cuda-graphs > "$out/ncu_conv_pool.txt" 2>&1
  grep -vE "^==PROF==|^ +-+ +-+ +-+$" "$out/ncu_conv_pool.txt" | grep -E "Duration|Throughput|Occupancy|Registers|Shared Memory|Block Limit|Warp Cycles|Stall|Bank|Issue|Eligible|Active Warps|Waves|Grid Size|Executed Ipc|Pipe|One or More|No Eligible|L1/TEX Hit|L2 Hit|DRAM" | head -80
} 2>&1 | tee "$out/conv_pool_profile.log"
# SASS=1: per-instruction executed counts (the source page, SASS) to $out/conv_pool_sass.csv.
if [ -n "${SASS:-}" ]; then
  ncu --clock-control none -k regex:conv_pool -c 1 --section SourceCounters --page source --print-source sass --csv \
      "$bin/kiln" bench /tmp/stem.kiln --input x=/tmp/stem_x.npy -n 1 --warmup 0 --device-io --no-cuda-graphs \
      > "$out/conv_pool_sass.csv" 2> "$out/conv_pool_sass.err"
  wc -l "$out/conv_pool_sass.csv"
fi
