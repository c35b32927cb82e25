#!/usr/bin/env bash
# Checks kiln as users install it (scripts/test.sh runs it after the build):
#  1. the wheel: built from build/ (`pip wheel`, no second compile), installed with its dependencies
#     from PyPI into a fresh virtual environment (build/wheel-venv, no access to .venv or the source
#     tree); there, from another folder and without PYTHONPATH, `import kiln` runs the example model
#     and matches ONNX Runtime (.venv's), and the `kiln` command does info/build/run;
#  2. the C++ package: `cmake --install build` into build/install-test; each installed header compiles
#     alone as C++17, and tests/install/consumer (find_package(kiln), kiln::kiln, C++17) is built
#     against it and runs the example model.
# Any failure ends it with a non-zero status.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CCACHE_DIR=${CCACHE_DIR:-$root/.ccache}
[ -f build/build.ninja ] || scripts/build.sh
unset PYTHONPATH
work=$root/build/install-check
rm -rf build/dist build/wheel-venv build/install-test "$work"
mkdir -p "$work"
model=$root/examples/tiny_cnn.onnx
input=$root/examples/tiny_cnn_input.npy
# Runs a command with its output in $work/NAME.log, printed only when it fails.
logged() {
  local name=$1; shift
  "$@" > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; echo "failed: $*"; return 1; }
}
# Installed binaries must find libkiln through $ORIGIN, never through a run path into this checkout.
no_checkout_paths() {
  local f
  for f in "$@"; do
    if readelf -d "$f" | grep -E "R(UN)?PATH" | grep -qF "$root"; then
      echo "$f: its run path names $root:"; readelf -d "$f" | grep -E "R(UN)?PATH"; return 1
    fi
  done
}

echo "== the example model's expected output (onnxruntime in .venv)"
.venv/bin/python tests/install/ort_expected.py "$model" "$input" "$work/expected.npy"

echo "== wheel (pip wheel from build/)"
.venv/bin/python -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
  -C build-dir=build -w build/dist .
wheel=$(ls build/dist/kiln-*.whl)
echo "$(basename "$wheel"): $(du -h "$wheel" | cut -f1)"
.venv/bin/python - "$wheel" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
missing = [f for f in ("LICENSE", "NOTICE") if not any(n.endswith(".dist-info/licenses/" + f) for n in names)]
assert not missing, f"the wheel lacks {missing} (pyproject.toml's license-files)"
PY

echo "== install it into a fresh virtual environment (dependencies from PyPI)"
.venv/bin/python -m venv build/wheel-venv
venv=$root/build/wheel-venv
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$wheel"

echo "== import kiln from another folder, no PYTHONPATH"
cd "$work"
"$venv/bin/python" - "$venv" "$model" "$input" "$work/expected.npy" <<'PY'
import os
import sys

import numpy as np

import kiln

venv, model, inp, expected = sys.argv[1:]
pkg = os.path.dirname(os.path.realpath(kiln.__file__))
assert pkg.startswith(os.path.realpath(venv) + os.sep), f"kiln imported from {pkg}, not from {venv}"
with open("/proc/self/maps") as f:
    libs = {line.split()[-1] for line in f if "libkiln.so" in line}
assert libs == {os.path.join(pkg, "lib", "libkiln.so")}, f"libkiln loaded from {libs}"
sess = kiln.InferenceSession(model, providers=["CPUExecutionProvider"])
(y,) = sess.run(None, {sess.get_inputs()[0].name: np.load(inp)})
want = np.load(expected)
err = float(np.max(np.abs(y - want)))
print(f"kiln {kiln.__version__} from {pkg}: output {y.shape} {y.dtype}, max abs difference from onnxruntime {err:.3g}")
assert y.shape == want.shape and y.dtype == want.dtype and err <= 1e-4
PY

pkg=$(echo "$venv"/lib/python*/site-packages/kiln)
# A CUDA build ships its CUDA backend beside libkiln (libkiln opens it on demand).
cuda_module=()
if grep -q "^KILN_CUDA:BOOL=ON" "$root/build/CMakeCache.txt"; then
  cuda_module=(lib/libkiln_cuda.so)
  [ -e "$pkg/lib/libkiln_cuda.so" ] || { echo "the wheel of a CUDA build lacks kiln/lib/libkiln_cuda.so"; exit 1; }
fi
no_checkout_paths "$pkg"/_kiln*.so "$pkg/lib/libkiln.so" "$pkg/bin/kiln" "${cuda_module[@]/#/$pkg/}"

echo "== the kiln command"
kiln=$venv/bin/kiln
"$kiln" --version
logged kiln-help "$kiln" --help
logged kiln-info "$kiln" info "$model"
logged kiln-build "$kiln" build "$model" -o "$work/tiny_cnn.kiln"
logged kiln-run "$kiln" run "$work/tiny_cnn.kiln" --input "image=$input" --output-dir "$work/out"
"$venv/bin/python" -c "
import sys, numpy as np
y, want = np.load('$work/out/probabilities.npy'), np.load('$work/expected.npy')
err = float(np.max(np.abs(y - want)))
print(f'kiln run: max abs difference from onnxruntime {err:.3g}')
sys.exit(0 if y.shape == want.shape and err <= 1e-4 else 1)"
# The command's exit status is the binary's (the wrapper execs it).
rc=0; "$kiln" info "$work/missing.onnx" > /dev/null 2>&1 || rc=$?
want_rc=0; "$pkg/bin/kiln" info "$work/missing.onnx" > /dev/null 2>&1 || want_rc=$?
if [ "$rc" -eq 0 ] || [ "$rc" -ne "$want_rc" ]; then
  echo "kiln info on a missing file exited $rc, the binary $want_rc"
  exit 1
fi
cd "$root"

echo "== C++ package: cmake --install, then a program built with find_package(kiln)"
logged cmake-install cmake --install build --prefix build/install-test
for f in bin/kiln include/kiln/kiln.h lib/cmake/kiln/kilnConfig.cmake lib/cmake/kiln/kilnConfigVersion.cmake \
         share/doc/kiln/LICENSE "${cuda_module[@]}"; do
  [ -e "build/install-test/$f" ] || { echo "cmake --install left out $f"; exit 1; }
done
if find build/install-test -mindepth 1 \( -name "*test*" -o -name "fuzz_*" -o -name "_kiln*" \) | grep -q .; then
  echo "cmake --install installed tests or the Python module:"; find build/install-test; exit 1
fi
no_checkout_paths build/install-test/bin/kiln build/install-test/lib/libkiln.so "${cuda_module[@]/#/build/install-test/}"
build/install-test/bin/kiln --version
# Each installed header on its own, as C++17 (kiln::kiln exports cxx_std_17; kiln builds as C++20).
for h in build/install-test/include/kiln/*.h; do
  echo "#include \"kiln/$(basename "$h")\"" |
    logged "cxx17-$(basename "$h" .h)" "${CXX:-c++}" -std=c++17 -pedantic-errors -fsyntax-only -x c++ \
      -I build/install-test/include -
done
# The C API: its header alone as C99, and the C example built against the installed library and run.
echo '#include "kiln/kiln_c.h"' |
  logged c99-kiln_c "${CC:-cc}" -std=c99 -pedantic-errors -fsyntax-only -x c -I build/install-test/include -
logged c-example "${CC:-cc}" -std=c99 -Wall -Werror examples/c/classify.c -I build/install-test/include \
  -L build/install-test/lib -lkiln -Wl,-rpath,"$root/build/install-test/lib" -o "$work/classify"
"$work/classify" examples/tiny_cnn.onnx image 1x3x32x32 | grep -q "^probabilities: " ||
  { echo "the C example built against the installed kiln did not print the probabilities"; exit 1; }
logged consumer-configure cmake -S tests/install/consumer -B "$work/consumer" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$root/build/install-test"
logged consumer-build cmake --build "$work/consumer"
"$work/consumer/kiln_consumer" "$model" "$input" "$work/expected.npy"
echo "install check: clean"
