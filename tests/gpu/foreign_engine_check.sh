#!/usr/bin/env bash
# #45 on the GPU: an engine whose fingerprint names another GPU (this machine's own engine with the GPU
# name's last character changed, re-sealed by tests/python/test_foreign_engine.py's checksum) loaded
# with --on-mismatch rebuild: the rebuild's time with and without the timing cache the build wrote, and
# the rebuilt engine's speed against the original's (kiln bench, GPU median). ResNet-50 FP16 batch 64.
#   MODELS="resnet50" bash tests/gpu/foreign_engine_check.sh BIN_DIR OUT_DIR
set -uo pipefail
. "$(dirname "$0")/lib.sh"
models="${MODELS:-resnet50}"
{
  machine_and_unit_tests "${FILTER:-ForeignCudaEngine.*}"
  prepare_zoo $models
  for m in $models; do
    # The build's timing cache in the folder layout the CLI's default cache uses (one file per device).
    rm -rf "$out/xdg"; mkdir -p "$out/xdg/kiln/timing"
    "$bin/kiln" build build/zoo/${m}_op17.onnx -o /tmp/$m.kiln --device cuda --precision fp16 \
      --timing-cache "$out/xdg/kiln/timing" 2>&1 | tail -1
    python3 - /tmp/$m.kiln /tmp/${m}_foreign.kiln <<'PY'
import sys, struct
sys.path.insert(0, "tests/python")
from engine_checksum import checksum64
data = open(sys.argv[1], "rb").read()
body = data[:-24]
name = b"NVIDIA H200" if b"NVIDIA H200" in body else b"NVIDIA H100"
assert body.count(name) == 1, body.count(name)
body = body.replace(name, name[:-1] + b"9")
open(sys.argv[2], "wb").write(body + b"KILNSUM1" + struct.pack("<QQ", checksum64(body), len(body)))
print("foreign copy: fingerprint names", (name[:-1] + b"9").decode())
PY
    args=$(zoo_args $m 64)
    echo "== $m: strict load"; "$bin/kiln" bench /tmp/${m}_foreign.kiln $args -n 5 2>&1 | grep -E "error" | cut -c1-300
    echo "== $m: --on-mismatch rebuild, no timing cache (--no-cache)"
    "$bin/kiln" bench /tmp/${m}_foreign.kiln $args -n 50 --warmup 10 --on-mismatch rebuild --no-cache 2>&1 | grep -E "rebuilt|gpu median|rror"
    echo "== $m: --on-mismatch rebuild with the build's timing cache"
    XDG_CACHE_HOME="$out/xdg" "$bin/kiln" bench /tmp/${m}_foreign.kiln $args -n 50 --warmup 10 --on-mismatch rebuild 2>&1 |
      grep -E "rebuilt|gpu median|rror"
    echo "== $m: the original engine"
    "$bin/kiln" bench /tmp/$m.kiln $args -n 50 --warmup 10 2>&1 | grep -E "gpu median|rror"
  done
} 2>&1 | tee "$out/foreign_engine_check.log"
