#!/usr/bin/env bash
# Runs every test: C++ unit tests (ctest), Python API tests (pytest), the model zoo's agreement
# with onnxruntime (models present in build/zoo/), onnx's conformance suites, and the installed
# packages (scripts/check_install.sh: the wheel in a fresh environment, find_package(kiln)). The C++
# and Python suites run again with the CPU capped to the weakest ISA kiln supports; at the end, the
# skipped tests are counted per reason (tests/skip_summary.py).
# The Python tests run against the kiln package installed into .venv (scripts/install.sh), not
# python/ in the source tree. GPU tests report themselves as skipped on machines without a GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ -f build/build.ninja ] || scripts/setup.sh --no-build
scripts/build.sh
scripts/install.sh
reports=build/test-reports
rm -rf "$reports"
mkdir -p "$reports"
echo "== unit tests"
(cd build && ctest --output-on-failure -j2 --timeout 300 --output-junit test-reports/ctest.xml)
unset PYTHONPATH
if [ -d tests/python ]; then
  echo "== python tests"
  .venv/bin/python -m pytest -q -p no:cacheprovider tests/python --junitxml="$reports/python.xml"
fi
# The weakest machines' paths, on this machine: kiln's own loops capped to baseline x86-64 and oneDNN
# to SSE4.1 (no AVX2, no AVX-512, no VNNI: the exact int8 kernels, no Winograd), then the AVX2 copies
# with oneDNN at AVX2 (an AVX2-only machine). Every C++ unit test (in one process: ~2 s) and every
# Python test (~1 min) under the weakest cap, so a green run here proves the weak machine; tests
# read what the capped process may use (kiln_isa.py, host_cpu_isa()), never /proc/cpuinfo.
weakest=(env KILN_CPU_ISA=baseline ONEDNN_MAX_CPU_ISA=SSE41)
echo "== weakest ISA (KILN_CPU_ISA=baseline ONEDNN_MAX_CPU_ISA=SSE41): C++ unit tests"
"${weakest[@]}" build/kiln_tests --gtest_brief=1 --gtest_output="xml:$reports/gtest_weakest.xml"
echo "== AVX2 (KILN_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2): C++ unit tests"
env KILN_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 build/kiln_tests --gtest_brief=1 --gtest_output="xml:$reports/gtest_avx2.xml"
if [ -d tests/python ]; then
  echo "== weakest ISA: python tests"
  "${weakest[@]}" .venv/bin/python -m pytest -q -p no:cacheprovider tests/python --junitxml="$reports/python_weakest.xml"
  echo "== AVX2: python tests of the CPU fast paths"
  env KILN_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 .venv/bin/python -m pytest -q -p no:cacheprovider \
    tests/python/test_cpu_fast_paths.py tests/python/test_quantization.py --junitxml="$reports/python_avx2.xml"
fi
if [ -d tests/models ]; then
  # Models exported into build/zoo/ (scripts/zoo.sh, or the CI subset in .ci/run); absent ones skip.
  echo "== model zoo (kiln vs onnxruntime)"
  .venv/bin/python -m pytest -q -rs -p no:cacheprovider tests/models --junitxml="$reports/models.xml"
  echo "== model zoo, weakest ISA"
  "${weakest[@]}" .venv/bin/python -m pytest -q -p no:cacheprovider tests/models --junitxml="$reports/models_weakest.xml"
fi
echo "== onnx conformance (onnx's own backend test runner against kiln.backend)"
.venv/bin/python tests/conformance/run.py --suite all --json build/conformance.json
echo "== onnx conformance, weakest ISA (the same expected failures)"
"${weakest[@]}" .venv/bin/python tests/conformance/run.py --suite all --json build/conformance_weakest.json
echo "== operator support table and arity table are current"
.venv/bin/python tools/gen_op_table.py --results build/conformance.json --check
.venv/bin/python tools/gen_arity.py --check
echo "== the wheel in a fresh environment, and the C++ package (find_package(kiln))"
scripts/check_install.sh
# The self-contained CPU wheel (scripts/build_wheel.sh: auditwheel) in a fresh environment, under env -i
# and in a chroot without the build's libraries: about 40 s from a CPU-only build/. It needs a CPU-only
# build (KILN_CUDA=OFF); from a CUDA build/ it would compile a second tree, so it is left to
# scripts/prestop.sh there.
if grep -q "^KILN_CUDA:BOOL=OFF" build/CMakeCache.txt; then
  echo "== the self-contained CPU wheel (scripts/check_wheel.sh)"
  scripts/check_wheel.sh
else
  echo "== the self-contained CPU wheel: not checked here (build/ is a CUDA build; scripts/prestop.sh checks it)"
fi
.venv/bin/python tests/skip_summary.py "unit=$reports/ctest.xml" "python=$reports/python.xml" \
  "unit, weakest ISA=$reports/gtest_weakest.xml" "unit, AVX2=$reports/gtest_avx2.xml" \
  "python, weakest ISA=$reports/python_weakest.xml" "python, AVX2=$reports/python_avx2.xml" \
  "model zoo=$reports/models.xml" "model zoo, weakest ISA=$reports/models_weakest.xml"
