#!/usr/bin/env bash
# Runs every test: C++ unit tests (ctest), Python API tests (pytest), the model zoo's agreement
# with onnxruntime (models present in build/zoo/), onnx's conformance suites, and the installed
# packages (scripts/check_install.sh: the wheel in a fresh environment, find_package(kiln)).
# The Python tests run against the kiln package installed into .venv (scripts/install.sh), not
# python/ in the source tree. GPU tests report themselves as skipped on machines without a GPU.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ -f build/build.ninja ] || scripts/setup.sh --no-build
scripts/build.sh
scripts/install.sh
echo "== unit tests"
(cd build && ctest --output-on-failure -j2 --timeout 300)
# The CPU kernels' hot loops have AVX-512, AVX2 and baseline copies, chosen by the CPU: on an AVX-512
# machine the runs above take the AVX-512 ones, so the kernels' own tests run again on the AVX2 copies.
echo "== CPU kernels' AVX2 copies (KILN_CPU_ISA=avx2)"
KILN_CPU_ISA=avx2 build/kiln_tests --gtest_brief=1 \
  --gtest_filter='DwConv.*:SigmoidSimd.*:PackedConv.*:NnPackedGemm.*:NnGemv.*:NnPool.*:NnConv.*:NnSoftmax.*:NnNorm.*:ElementwiseUnary.*:ElementwiseBinary.*:FusedAttention.*:ShapeTranspose.*'
unset PYTHONPATH
if [ -d tests/python ]; then
  echo "== python tests"
  .venv/bin/python -m pytest -q tests/python
  KILN_CPU_ISA=avx2 .venv/bin/python -m pytest -q tests/python/test_cpu_fast_paths.py
fi
if [ -d tests/models ]; then
  # Models exported into build/zoo/ (scripts/zoo.sh, or the CI subset in .ci/run); absent ones skip.
  echo "== model zoo (kiln vs onnxruntime)"
  .venv/bin/python -m pytest -q -rs tests/models
fi
echo "== onnx conformance (onnx's own backend test runner against kiln.backend)"
.venv/bin/python tests/conformance/run.py --suite all --json build/conformance.json
echo "== operator support table and arity table are current"
.venv/bin/python tools/gen_op_table.py --results build/conformance.json --check
.venv/bin/python tools/gen_arity.py --check
echo "== the wheel in a fresh environment, and the C++ package (find_package(kiln))"
scripts/check_install.sh
