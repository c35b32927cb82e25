# tests/gpu/lib.sh — sourced by the GPU check scripts (SCRIPT BIN_DIR OUT_DIR ...): sets `bin` (the
# built binaries, put on the library path), `out` (made) and `root`, and moves to the repository root.
bin=$(cd "$1" && pwd); out=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mkdir -p "$out"
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PYTHONUNBUFFERED=1
# libkiln opens the CUDA backend, libkiln_cuda.so, from its own folder: carry it beside libkiln.so
[ -e "$bin/libkiln_cuda.so" ] ||
  echo "warning: $bin has no libkiln_cuda.so (the CUDA backend; build/libkiln_cuda.so): CUDA requests will fail"
# a packed copy carries the test plugins in BIN_DIR/plugins (tests/unit/test_plugins.cpp)
[ -d "$bin/plugins" ] && export KILN_TEST_PLUGIN_DIR="$bin/plugins"
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

# The host CPU's description, kiln's Python module built for the host's Python (python/module.cpp
# against the carried libkiln.so; pybind11's headers from the host's packages, torch has them) and
# the zoo at opset 17 ($HOST_MODELS, comma-separated: only those): what the CPU benchmarks on the host
# need (tests/gpu/cpu_host_*.sh).
cpu_host_setup() {
  date -u +"%Y-%m-%d %H:%M UTC"
  lscpu | grep -E "Model name|^CPU\(s\)|Thread|Socket|NUMA node\(s\)|L2|L3"
  grep -o -w -E 'avx512f|avx512_vnni|avx512_bf16|amx_tile|avx_vnni' /proc/cpuinfo | sort -u | tr '\n' ' '; echo

  py_inc=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  pb_inc=$(python3 -c 'import pybind11; print(pybind11.get_include())' 2>/dev/null ||
           python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "include"))')
  suffix=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  echo "== building python/kiln/_kiln$suffix (Python.h in $py_inc, pybind11 from $pb_inc)"
  g++ -O3 -DNDEBUG -fPIC -fvisibility=hidden -std=gnu++20 -shared -Iinclude -isystem "$pb_inc" -isystem "$py_inc" \
      python/module.cpp -o "python/kiln/_kiln$suffix" -L"$bin" -lkiln -Wl,-rpath,"$bin"
  export PYTHONPATH=python
  python3 -c 'import kiln, onnxruntime; print("kiln", kiln.__version__, "onnxruntime", onnxruntime.__version__)'

  local models=${HOST_MODELS:-resnet50,mobilenet_v2,efficientnet_b0,convnext_tiny,vit_b_16,deeplabv3_mobilenet_v3_large,bert_base,distilbert,gpt2}
  python3 bench/zoo/export.py --models "$models" --opsets 17 2>&1 | grep -E "export:|rror" || true
}

# The date, the GPU, and (unless SKIP_UNIT is set) the CUDA unit tests matching the gtest filter $1:
# the summary and failures printed, the whole log in $out/cuda_unit_tests.log.
machine_and_unit_tests() {
  date -u +"%Y-%m-%d %H:%M UTC"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  [ -n "${SKIP_UNIT:-}" ] && return 0
  echo "== CUDA unit tests ($1)"
  "$bin/kiln_tests" --gtest_filter="$1" > "$out/cuda_unit_tests.log" 2>&1
  grep -E "^\[ +(PASSED|FAILED|SKIPPED) +\]|tests ran" "$out/cuda_unit_tests.log"
  grep -B2 -A8 "Failure" "$out/cuda_unit_tests.log" | head -40
}
