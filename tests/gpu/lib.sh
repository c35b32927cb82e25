# tests/gpu/lib.sh — sourced by the GPU check scripts (SCRIPT BIN_DIR OUT_DIR ...): sets `bin` (the
# built binaries, put on the library path), `out` (made) and `root`, and moves to the repository root.
bin=$(cd "$1" && pwd); out=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$out"
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PYTHONUNBUFFERED=1
cd "$root"

# The zoo's seeded inputs at batch 1 and 64, as build/inputs/<model>_<input>_b<batch>.npy.
save_zoo_inputs() {
  python3 - <<'PY'
import os, sys
import numpy as np
sys.path.insert(0, "bench/zoo")
import zoo
os.makedirs("build/inputs", exist_ok=True)
for name, model in zoo.MODELS.items():
    for b in (1, 64):
        for k, v in zoo.make_inputs(model, b, seed=0).items():
            np.save(f"build/inputs/{name}_{k}_b{b}.npy", v)
PY
}
