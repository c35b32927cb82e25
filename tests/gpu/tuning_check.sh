#!/usr/bin/env bash
# Auto-tuning on a machine with an NVIDIA GPU, from a folder with the built binaries:
#   tests/gpu/tuning_check.sh BIN_DIR OUT_DIR
# CUDA unit tests; then per zoo model (FP16, opt level 2, shapes fixed at batch 1 and 64): an engine
# built without tuning against one tuned (cuDNN algorithms and cuBLASLt heuristic results timed per
# layer), build times, outputs compared, run times; a second tuned build reading the timing cache the
# first wrote. Writes OUT_DIR/tuning.log.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
models="${MODELS:-resnet50 mobilenet_v2 bert_base}"  # MODELS=... SKIP_UNIT=1 for more runs
# name:BxCx...,name2:... for model M's saved inputs at batch B.
shapes_spec() {
  python3 - "$1" "$2" <<'PY'
import glob, os, sys
import numpy as np
m, b = sys.argv[1], sys.argv[2]
items = []
for f in sorted(glob.glob(f"build/inputs/{m}_*_b{b}.npy")):
    name = os.path.basename(f)[len(m) + 1:-len(f"_b{b}.npy")]
    items.append(name + ":" + "x".join(str(d) for d in np.load(f).shape))
print(",".join(items))
PY
}
now() { date +%s.%N; }
{
  [ -n "${SKIP_UNIT:-}" ] || gpu_unit_and_alloc_tests
  prepare_zoo $models
  cache="$out/timing_cache.txt"
  rm -f "$cache"
  for m in $models; do
    f=build/zoo/${m}_op17.onnx
    for b in 1 64; do
      spec=$(shapes_spec $m $b); args=$(zoo_args $m $b); n=$([ $b = 1 ] && echo 100 || echo 20)
      base="$bin/kiln build $f --device cuda --opt-level 2 --precision fp16 --shapes $spec --no-accuracy-check -q"
      t0=$(now); $base --no-tune -o "$out/plain.kiln" > /dev/null 2>"$out/err.txt" || cat "$out/err.txt"; t1=$(now)
      $base --tune --timing-cache "$cache" -o "$out/tuned.kiln" -v > /dev/null 2>"$out/${m}_b${b}_tune.txt" || tail -5 "$out/${m}_b${b}_tune.txt"; t2=$(now)
      $base --tune --timing-cache "$cache" -o "$out/cached.kiln" > /dev/null 2>&1; t3=$(now)
      printf "== %s fp16 b%s: build untuned %.1fs, tuned %.1fs, tuned from the cache %.1fs; %s layers tuned, %s changed from the heuristic's choice\n" \
        $m $b $(awk "BEGIN{print $t1 - $t0}") $(awk "BEGIN{print $t2 - $t1}") $(awk "BEGIN{print $t3 - $t2}") \
        $(grep -c "^kiln: tune " "$out/${m}_b${b}_tune.txt") $(grep "^kiln: tune " "$out/${m}_b${b}_tune.txt" | grep -- "->" | grep -vc -- "(= first)" )
      grep "^kiln: tune " "$out/${m}_b${b}_tune.txt" | head -3 | cut -c1-400
      "$bin/kiln" compare "$out/plain.kiln" "$out/tuned.kiln" $args --runs 3 --rtol 5e-2 2>&1 | grep -E "relative L2|rror"
      "$bin/kiln" compare "$out/tuned.kiln" "$out/cached.kiln" $args --runs 3 --rtol 5e-2 2>&1 | grep -E "relative L2|rror" | sed 's/^/cached vs tuned: /'
      # ABBA: untuned, tuned, tuned, untuned.
      for e in plain tuned tuned plain; do
        "$bin/kiln" bench "$out/$e.kiln" $args -n $n --warmup 10 2>&1 | grep -E "median|rror" | sed "s/^/$e: /"
      done
      "$bin/kiln" inspect "$out/tuned.kiln" | grep -c "{tactic" | sed 's/^/steps with a tactic in the engine: /'
      # CUDA graphs must still capture in the tuned engine (one line per signature that fell back).
      KILN_LOG_LEVEL=info "$bin/kiln" bench "$out/tuned.kiln" $args -n 3 --warmup 2 2>&1 | grep -iE "capture|graphs" | head -3
    done
  done
  "$bin/kiln" cache info "$cache"
  cp "$cache" "$out/" 2>/dev/null
  rm -f "$out"/*.kiln "$out/err.txt"
} 2>&1 | tee "$out/tuning.log"
