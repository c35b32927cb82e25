#!/usr/bin/env bash
# The Python API on a CUDA GPU, from the repository root:  tests/gpu/python_io_check.sh BIN_DIR OUT_DIR
# BIN_DIR holds the built binaries (libkiln.so, kiln, kiln_tests) and pybind11's headers in
# BIN_DIR/pybind11/include. The extension is compiled here for this machine's Python (a module built
# for another Python version does not import), then:
# 1. tests/gpu/python_io_check.py: IOBinding with torch CUDA tensors by DLPack and raw pointers, device
#    outputs written in place, OrtValue runs, profiling of a CUDA session;
# 2. the Python API and CLI tests (tests/python/test_ort_parity.py, test_api.py, test_compare_cli.py)
#    with a GPU present; 3. `kiln profile` of a CUDA engine.
# Writes OUT_DIR/python_io.log.
set -uo pipefail
here=$(dirname "$0")
. "$here/lib.sh"
{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 --version
  pkg=/tmp/kiln_pkg
  mkdir -p "$pkg/kiln" build
  cp python/kiln/*.py "$pkg/kiln/"
  ln -sf "$bin/kiln" build/kiln
  inc=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
  suffix=$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
  echo "== compiling the extension for $(python3 -c 'import sys; print(sys.version.split()[0])') ($inc)"
  ls "$inc/Python.h" || echo "Python.h missing"
  time g++ -O2 -shared -fPIC -std=c++20 -Iinclude -I"$bin/pybind11/include" -I"$inc" python/module.cpp \
    -o "$pkg/kiln/_kiln$suffix" -L"$bin" -lkiln -Wl,-rpath,"$bin" || echo "COMPILE FAILED"
  export PYTHONPATH=$pkg
  echo "== python_io_check.py"
  python3 tests/gpu/python_io_check.py
  echo "== pytest (GPU present)"
  python3 -m pytest -q -rs tests/python/test_ort_parity.py tests/python/test_api.py tests/python/test_compare_cli.py \
    -p no:cacheprovider 2>&1 | grep -E "^(FAILED|ERROR|SKIPPED)|passed|failed|^E  " | head -30
  echo "== kiln profile of a CUDA engine"
  "$bin/kiln" profile examples/tiny_cnn.onnx --device cuda --runs 20 -o "$out/tiny_cnn_cuda_profile" | tail -14
} 2>&1 | tee "$out/python_io.log"
