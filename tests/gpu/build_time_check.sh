#!/usr/bin/env bash
# Build time on models the zoo does not hold (issue #41): torchvision's detection, segmentation and
# mobile nets exported here (random weights, batch 1, opset 17, TorchScript exporter), each built for
# CUDA cold (default tuning, no timing cache), warm (the timing cache the cold build wrote) and
# untuned (--no-tune) and with no tuning budget (--tune-budget 0), and the engines timed with `kiln bench` (GPU median).
# Also the CUDA unit tests. From the repository root, binaries in BIN_DIR:
#   bash tests/gpu/build_time_check.sh BIN_DIR OUT_DIR   (MODELS="a b" for fewer, EXTRA="--tune-budget 5")
set -uo pipefail
. "$(dirname "$0")/lib.sh"
models="${MODELS:-ssdlite320_mobilenet_v3_large fasterrcnn_mobilenet_v3_large_320_fpn mobilenet_v3_large deeplabv3_mobilenet_v3_large regnet_y_1_6gf densenet121}"
now() { date +%s.%N; }
secs() { awk "BEGIN{printf \"%.1f\", $2 - $1}"; }
{
  machine_and_unit_tests 'Cuda*:Runtime.Cuda*:*Attention*:Tuning*:EngineChecks*'
  mkdir -p build/tv
  python3 - $models <<'PY'
import sys, time, warnings
import torch, torchvision
warnings.filterwarnings("ignore")
from torchvision.models import detection, segmentation
for name in sys.argv[1:]:
    t = time.time()
    ctor = getattr(detection, name, None) or getattr(segmentation, name, None) or getattr(torchvision.models, name)
    kw = {"weights_backbone": None} if ctor.__module__.startswith(("torchvision.models.detection", "torchvision.models.segmentation")) else {}
    m = ctor(weights=None, **kw).eval()
    size = 320 if "320" in name else 224
    x = torch.rand(1, 3, size, size)
    arg = [x[0]] if "detection" in ctor.__module__ else x
    torch.onnx.export(m, (arg,), f"build/tv/{name}.onnx", opset_version=17, input_names=["image"], dynamo=False)
    print(f"export: {name} {time.time() - t:.1f} s", flush=True)
PY
  for m in $models; do
    f=build/tv/$m.onnx; [ -f "$f" ] || { echo "== $m: not exported"; continue; }
    cache="$out/${m}_cache.txt"; rm -f "$cache"
    t0=$(now); timeout ${BUILD_LIMIT:-150} "$bin/kiln" build $f -o /tmp/tuned.kiln --device cuda --timing-cache "$cache" ${EXTRA:-} -v > "$out/build_${m}.txt" 2>&1 || tail -3 "$out/build_${m}.txt"
    t1=$(now); "$bin/kiln" build $f -o /tmp/warm.kiln --device cuda --timing-cache "$cache" ${EXTRA:-} > /dev/null 2>&1
    t2=$(now); "$bin/kiln" build $f -o /tmp/plain.kiln --device cuda --no-tune > /dev/null 2>&1
    t3=$(now); timeout ${BUILD_LIMIT:-150} "$bin/kiln" build $f -o /tmp/full.kiln --device cuda --tune-budget 0 > /dev/null 2>&1
    t3b=$(now)
    printf "== %s: build cold %s s, warm %s s, untuned %s s, unlimited budget (cold) %s s; %s\n" $m $(secs $t0 $t1) \
      $(secs $t1 $t2) $(secs $t2 $t3) $(secs $t3 $t3b) \
      "$(grep -E '^kiln: tuning' "$out/build_${m}.txt" | tail -1)"
    # `kiln run` of the .onnx twice with the user's default timing cache (a fresh cache home).
    t4=$(now); XDG_CACHE_HOME="$out/xdg_$m" "$bin/kiln" run $f --device cuda > /dev/null 2>&1
    t5=$(now); XDG_CACHE_HOME="$out/xdg_$m" "$bin/kiln" run $f --device cuda > /dev/null 2>&1; t6=$(now)
    printf "   kiln run %s.onnx --device cuda: first %s s, second (default timing cache) %s s\n" $m $(secs $t4 $t5) $(secs $t5 $t6)
    for e in tuned plain full; do
      printf "   %s: " $e; "$bin/kiln" bench /tmp/$e.kiln -n 100 --warmup 20 2>&1 | grep -E "gpu median|rror" | head -2
    done
  done
} 2>&1 | tee "$out/build_time_check.log"
