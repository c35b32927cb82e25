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

# Exports the zoo models named (space-separated) at the opsets in $OPSETS (default 17; e.g. "13,17")
# with the machine's PyTorch, printing each export's line, then saves the zoo's inputs.
prepare_zoo() {
  local models="$*"
  python3 bench/zoo/export.py --models "${models// /,}" --opsets "${OPSETS:-17}" 2>&1 | grep -E "export:|rror"
  save_zoo_inputs
}

# The machine, the CUDA unit tests (log in $out/cuda_unit_tests.log: summary and failures printed)
# and the allocation tests (CPU and CUDA; CUDA runs replay graphs).
gpu_unit_and_alloc_tests() {
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "== CUDA unit tests"
  "$bin/kiln_tests" --gtest_filter='Cuda*:Runtime.Cuda*' > "$out/cuda_unit_tests.log" 2>&1
  grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) +\]|tests ran" "$out/cuda_unit_tests.log"
  grep -B2 -A6 "Failure" "$out/cuda_unit_tests.log" | head -80
  echo "== allocation tests (CPU and CUDA; CUDA runs replay graphs)"
  "$bin/kiln_alloc_tests" 2>&1 | grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) +\]|info|Failure|Which is|Expected"
}

# The --input arguments for model M's saved inputs at batch B (after save_zoo_inputs), for unquoted
# use: "$bin/kiln" bench ENGINE $(zoo_args M B).
zoo_args() {
  local npy k
  for npy in build/inputs/${1}_*_b${2}.npy; do
    k=$(basename "$npy" "_b${2}.npy")
    printf -- '--input %s=%s ' "${k#${1}_}" "$npy"
  done
}
